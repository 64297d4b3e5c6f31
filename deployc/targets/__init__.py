"""Target profiles and backends. Takes profile YAML files (and the search path); gives `TargetProfile`s and the
backend registry (`BACKENDS`), each backend one module that knows its schemes, availability, quantizer and
lowering (torch imported inside its methods only); also builds the native runners for x86 and arm64."""
