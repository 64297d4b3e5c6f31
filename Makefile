# The two set-up commands of the README. Both are idempotent: the virtual environment is
# (re)installed only when pyproject.toml changes.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test install system-deps clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

# Build the main example manifest for every target it lists, then show what came out.
demo: $(STAMP)
	$(BIN)/deployc validate manifests/*.yaml
	$(BIN)/deployc plan manifests/small_models.yaml
	$(BIN)/deployc build manifests/small_models.yaml --out dist

# Install everything and run the whole test suite.
test: $(STAMP)
	$(BIN)/python -m pytest -q

clean:
	rm -rf $(VENV) dist .deployc-cache
