"""What the tests share: projects and builds through the CLI (`projects`), the suites' manifests
(`suites`), seeded test nets (`testnets`), tiny Hugging Face models (`hf_models`, `decoders`), sounds and
tokenizer strings. Test modules import these, never each other."""
