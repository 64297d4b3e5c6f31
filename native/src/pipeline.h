// A bundle's pipeline graph, executed natively from text in to text out: tokenize (the bundle's
// tokenizer asset), model, vector_search, template and generate (the decoder's prefill and decode
// calls, greedy or seeded temperature/top-p sampling, tokens streamed as they come).
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "bundle.h"
#include "tokenizer.h"

namespace deployc {

struct RunOptions {
  std::string until;                                  // stop after this stage ("" runs them all)
  std::function<void(const std::string&)> on_text;    // generate: each new piece of text as it is decoded
};

class Pipeline {
 public:
  // Loads every program and tokenizer the stages use (and runs the declared warm-ups), timed as load_ms.
  static std::unique_ptr<Pipeline> open(Bundle& bundle, Failure& failure);
  double load_ms() const { return load_ms_; }
  // texts: the pipeline's text inputs by name; tensors: values given for STAGE.PORT (skipping that stage's
  // own computation, e.g. token ids computed elsewhere). result: {outputs, stages, latency_ms, load_ms,
  // generation: {prompt_tokens, tokens, first_token_ms, per_token_ms}}.
  Failure run(const std::map<std::string, std::string>& texts, const std::map<std::string, Array>& tensors,
              const RunOptions& options, nlohmann::json& result);

 private:
  explicit Pipeline(Bundle& bundle) : bundle_(bundle) {}
  Bundle& bundle_;
  std::map<std::string, std::unique_ptr<Tokenizer>> tokenizers_;  // by bundle file
  double load_ms_ = 0;
};

}  // namespace deployc
