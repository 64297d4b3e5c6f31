# The two set-up commands of the README. Both are idempotent: the virtual environment is
# (re)installed only when pyproject.toml changes.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test install system-deps clean
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

# Debian tools the tests use: the standard flatc decodes runtime.bin against the committed schema.
system-deps:
	@command -v /usr/bin/flatc >/dev/null || { $(SUDO) apt-get update -qq && \
		$(SUDO) apt-get install -y -qq flatbuffers-compiler >/dev/null; }

# Build the main example manifest for every target it lists, then show what came out.
demo: $(STAMP)
	$(BIN)/deployc validate manifests/*.yaml
	$(BIN)/deployc plan manifests/small_models.yaml
	$(BIN)/deployc build manifests/small_models.yaml --out dist --force

# Install everything and run the whole test suite.
test: $(STAMP) system-deps
	$(BIN)/python -m pytest -q

clean:
	rm -rf $(VENV) dist .deployc-cache
