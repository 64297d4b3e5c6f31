// Drives a decoder built in the static form (runtime_config.fbs, StaticDecoder) as deployc's decoder
// interface, forward(tokens[1, T], input_pos[T]) -> logits of the last position [1, vocab]: the KV caches
// live here between calls; a call's tokens go in prefill chunks (the last padded), a single token through
// the decode method; after each call its new k/v rows are written at their positions; a program built with a
// prefix token answers that token's position 0 from its constant methods (runtime_config.fbs). What
// deployc/pipeline/host/static_decoding.py does for `deployc run`.
#pragma once
#include <string>
#include <vector>

#include "config.h"
#include "failure.h"
#include "npy.h"

namespace deployc {

class Bundle;

class StaticDecoding {
 public:
  StaticDecoding(Bundle& bundle, std::string program, StaticDecoderSpec spec);
  // tokens int64 [1, T], input_pos int64 [T] (consecutive); outputs: {logits float32 [1, vocab]}.
  Failure forward(const Array& tokens, const Array& input_pos, std::vector<Array>& outputs);

 private:
  // Position 0 of the prefix token from the build's float rows (get_prefix_*): slot 0 of the caches, its logits.
  Failure first(Array& logits);
  Failure run(const std::string& method, int64_t width, const int64_t* ids, int64_t n, int64_t start, Array& logits);
  Bundle& bundle_;
  std::string program_;
  StaticDecoderSpec spec_;
  std::vector<Array> prefix_;  // get_prefix_k, get_prefix_v, get_prefix_logits, once read
  std::vector<Array> k_, v_;  // per layer: float32 [1, kv_heads, context, head_dim], the methods' inputs as they are
};

}  // namespace deployc
