"""The multi-model pipeline: takes the manifest's `pipeline:` section (and, through `manifest_view`, what it
reads of the models); gives its schema, validate-time checks, the runtime config's pipeline section and
each op's execution on this host (`ops/`, `host/`; numpy imported inside)."""
