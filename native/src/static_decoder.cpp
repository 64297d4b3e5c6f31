#include "static_decoder.h"

#include <algorithm>
#include <cstring>

#include "bundle.h"

namespace deployc {

namespace {
Array array(const std::string& dtype, std::vector<int64_t> shape) {
  Array a;
  a.dtype = dtype;
  a.shape = std::move(shape);
  a.data.assign(a.numel() * dtype_size(dtype), 0);
  return a;
}
}  // namespace

StaticDecoding::StaticDecoding(Bundle& bundle, std::string program, StaticDecoderSpec spec)
    : bundle_(bundle), program_(std::move(program)), spec_(std::move(spec)) {
  const Array cache = array("float32", {1, spec_.kv_heads, spec_.context, spec_.head_dim});
  k_.assign(spec_.layers, cache);
  v_.assign(spec_.layers, cache);
}

Failure StaticDecoding::forward(const Array& tokens, const Array& input_pos, std::vector<Array>& outputs) {
  if (tokens.dtype != "int64" || input_pos.dtype != "int64" || tokens.numel() != input_pos.numel() ||
      tokens.numel() == 0)
    return {2, program_ + ": a decoder call takes int64 tokens [1, T] and input_pos [T] alike"};
  const int64_t n = static_cast<int64_t>(tokens.numel());
  const int64_t* ids = tokens.as<int64_t>();
  const int64_t* pos = input_pos.as<int64_t>();
  const int64_t start = pos[0];
  for (int64_t i = 1; i < n; ++i)
    if (pos[i] != start + i) return {2, program_ + ": input_pos must be consecutive positions"};
  if (start < 0 || start + n > spec_.context)
    return {2, program_ + ": positions " + std::to_string(start) + ".." + std::to_string(start + n - 1) +
                   " are beyond the context of " + std::to_string(spec_.context) + " the program was built for"};
  Array logits;
  int64_t done = 0;
  if (start == 0 && spec_.prefix_token >= 0) {
    if (ids[0] != spec_.prefix_token)  // deployc/core/static_decoder.py, StaticDecoderLayout.refusal
      return {2, program_ + ": this decoder was built to start every sequence with token " +
                     std::to_string(spec_.prefix_token) + " (its bos, computed in float at build time: npu.prefix); "
                     "this one starts with " + std::to_string(ids[0])};
    if (Failure f = first(logits)) return f;
    done = 1;
  }
  while (done < n) {
    const bool single = n - done == 1;
    // One method serving both (npu.decode: prefill): a single token goes padded to its chunk.
    const int64_t width = single && spec_.decode_method != spec_.prefill_method ? 1 : spec_.chunk;
    const int64_t take = std::min(width, n - done);
    if (Failure f = run(single ? spec_.decode_method : spec_.prefill_method, width, ids + done, take, start + done,
                        logits))
      return f;
    done += take;
  }
  outputs.clear();
  outputs.push_back(std::move(logits));
  return {};
}

Failure StaticDecoding::first(Array& logits) {
  if (prefix_.empty()) {  // read once: the build's float rows of position 0
    for (const char* method : {"get_prefix_k", "get_prefix_v", "get_prefix_logits"}) {
      std::vector<Array> out;
      if (Failure f = bundle_.run(program_, method, std::vector<const Array*>{}, out)) return f;
      if (out.size() != 1 || out[0].dtype != "float32")
        return {1, program_ + "." + method + ": expected one float32 tensor"};
      prefix_.push_back(std::move(out[0]));
    }
    const size_t rows = static_cast<size_t>(spec_.layers * spec_.kv_heads * spec_.head_dim);
    if (prefix_[0].numel() != rows || prefix_[1].numel() != rows) {
      prefix_.clear();
      return {1, program_ + ": get_prefix_k/v do not hold [layers, kv_heads, head_dim] rows"};
    }
  }
  const int64_t context = spec_.context, heads = spec_.kv_heads, dim = spec_.head_dim;
  for (int64_t l = 0; l < spec_.layers; ++l)
    for (int kind = 0; kind < 2; ++kind) {
      const float* row = prefix_[kind].as<float>() + l * heads * dim;
      float* cache = reinterpret_cast<float*>((kind == 0 ? k_ : v_)[l].data.data());
      for (int64_t h = 0; h < heads; ++h) std::memcpy(cache + h * context * dim, row + h * dim, dim * sizeof(float));
    }
  logits = prefix_[2];
  logits.shape = {1, static_cast<int64_t>(prefix_[2].numel())};
  return {};
}

Failure StaticDecoding::run(const std::string& method, int64_t width, const int64_t* ids, int64_t n, int64_t start,
                            Array& logits) {
  const int64_t context = spec_.context, heads = spec_.kv_heads, dim = spec_.head_dim;
  Array tokens = array("int32", {1, width}), positions = array("int32", {width});
  auto* t = reinterpret_cast<int32_t*>(tokens.data.data());
  auto* p = reinterpret_cast<int32_t*>(positions.data.data());
  for (int64_t i = 0; i < width; ++i) {
    t[i] = i < n ? static_cast<int32_t>(ids[i]) : 0;
    p[i] = static_cast<int32_t>(std::min(start + i, start + n - 1));  // padded rows: never read
  }
  Array mask = array("float32", {1, 1, width, context + width});
  auto* m = reinterpret_cast<float*>(mask.data.data());
  for (int64_t row = 0; row < width; ++row) {
    float* r = m + row * (context + width);
    for (int64_t key = 0; key < context + width; ++key) {
      const bool seen = key < start || (key >= context && key - context <= std::min(row, n - 1));
      r[key] = seen ? 0.0f : static_cast<float>(spec_.masked_value);
    }
  }
  // The caches go in as they are: no copy of them a call (SmolLM2-135M's 60 are 23.6 MB).
  std::vector<const Array*> inputs = {&tokens, &positions, &mask};
  for (auto* caches : {&k_, &v_})
    for (const auto& c : *caches) inputs.push_back(&c);
  std::vector<Array> out;
  if (Failure f = bundle_.run(program_, method, inputs, out)) return f;
  if (out.size() != static_cast<size_t>(1 + 2 * spec_.layers) || out[0].shape.size() != 3)
    return {1, program_ + "." + method + ": returned " + std::to_string(out.size()) + " outputs, the static form has " +
                   std::to_string(1 + 2 * spec_.layers)};
  for (int64_t l = 0; l < spec_.layers; ++l)
    for (int kind = 0; kind < 2; ++kind) {  // the call's first n rows go to slots start..start+n-1
      const float* fresh = out[1 + kind * spec_.layers + l].as<float>();
      float* cache = reinterpret_cast<float*>((kind == 0 ? k_ : v_)[l].data.data());
      for (int64_t h = 0; h < heads; ++h)
        std::memcpy(cache + (h * context + start) * dim, fresh + h * width * dim, n * dim * sizeof(float));
    }
  const int64_t vocab = out[0].shape[2];
  logits = array("float32", {1, vocab});
  std::memcpy(logits.data.data(), out[0].as<float>() + (n - 1) * vocab, vocab * sizeof(float));
  return {};
}

}  // namespace deployc
