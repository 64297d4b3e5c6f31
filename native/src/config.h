// The runtime configuration as plain C++ data. Deliberately free of flatbuffers and ExecuTorch types.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace deployc {

constexpr uint32_t kSchemaVersion = 2;  // the newest runtime.bin schema this runner understands

struct Dim {
  int64_t value = -1;  // >= 0: fixed size; -1: dynamic within [min, max]
  std::string symbol;
  int64_t min = 0, max = 0;
  int64_t multiple_of = 1;
};

struct TensorSpec {
  std::string name, dtype;
  std::vector<Dim> shape;
};

struct MethodSpec {
  std::string name;
  std::vector<TensorSpec> inputs, outputs;
  uint64_t planned_memory_bytes = 0;
  std::vector<std::string> operators, delegates;
};

// A decoder in the static form (runtime_config.fbs, StaticDecoder): present when `chunk` > 0.
struct StaticDecoderSpec {
  std::string prefill_method, decode_method, update;
  int64_t chunk = 0, context = 0, layers = 0, kv_heads = 0, head_dim = 0;
  double masked_value = 0;
  int64_t prefix_token = -1;  // the first token whose position 0 the program's get_prefix_* methods hold
};

struct ProgramSpec {
  std::string name, file, sha256, unit, backend, quantization, verification;
  std::string data_file, data_sha256;  // external weights (.ptd), "" when they are inside the .pte
  uint64_t data_bytes = 0;
  uint64_t size_bytes = 0;
  int threads = 0, warmup = 0;
  double tolerance_min_cosine = 0, tolerance_min_sqnr_db = 0;  // what the build verified against eager
  // A decoder on held-out text (0: no tolerance): perplexity over eager's, mean KL, top-1 agreement.
  double tolerance_max_perplexity_ratio = 0, tolerance_max_kl = 0, tolerance_min_top1 = 0;
  // The task samples (verify.data): a classifier's top-1 agreement is judged by tolerance_min_top1, an
  // embedder's top-k neighbour overlap by tolerance_min_topk_overlap.
  double tolerance_min_topk_overlap = 0;
  std::vector<MethodSpec> methods;
  StaticDecoderSpec static_decoder;
  const MethodSpec* method(const std::string& n) const {
    for (const auto& m : methods) if (m.name == n) return &m;
    return nullptr;
  }
};

struct AssetSpec {
  std::string name, file, sha256, kind;
};

struct StageSpec {
  std::string name, op, program, method, params_json;
  std::vector<std::string> inputs, outputs;
};

struct RuntimeConfig {
  uint32_t schema_version = 0;
  std::string deployc_version, name, version, target;
  std::vector<ProgramSpec> programs;
  std::vector<AssetSpec> assets;
  bool has_pipeline = false;
  std::vector<std::string> pipeline_inputs, pipeline_outputs;
  std::vector<std::string> pipeline_input_types;  // text, image, audio (text for bundles that predate them)
  std::vector<StageSpec> stages;
};

// Reads and verifies runtime.bin (identifier, flatbuffer verifier, schema version).
// Returns an empty string on success, else what is wrong.
std::string read_runtime_config(const std::string& path, RuntimeConfig& out);

}  // namespace deployc
