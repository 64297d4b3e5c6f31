"""Load and validate. Takes a manifest YAML file and the profiles it names; gives a `Project` (the parsed
`Manifest`, its located YAML, the profiles) or every located error at once. Never imports torch or the
user's model code."""
