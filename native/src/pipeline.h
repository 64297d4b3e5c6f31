// A bundle's pipeline graph, executed natively from text in to text out: the stages in the runtime config's
// order, each through the op table (ops.h): tokenize, model, vector_search, template, generate (prefill and
// decode calls, greedy or seeded sampling, tokens streamed as they come), image, audio, similarity.
#pragma once
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "bundle.h"
#include "ops.h"

namespace deployc {

class Pipeline {
 public:
  // Loads every program and tokenizer the stages use (and runs the declared warm-ups), timed as load_ms.
  static std::unique_ptr<Pipeline> open(Bundle& bundle, Failure& failure, RunOptions options = {});
  double load_ms() const { return load_ms_; }
  // The options of the runs that follow (an app's token callback and cancellation change per run).
  void set_options(RunOptions options) { ctx_.set_options(std::move(options)); }
  // texts: the pipeline's text inputs (and files' bytes) by name; tensors: values given for STAGE.PORT (skipping
  // that stage's own computation, e.g. token ids computed elsewhere). result: {outputs, stages, latency_ms,
  // load_ms, generation: {prompt_tokens, tokens, first_token_ms, per_token_ms}}.
  Failure run(const std::map<std::string, std::string>& texts, const std::map<std::string, Array>& tensors,
              nlohmann::json& result);

 private:
  Pipeline(Bundle& bundle, RunOptions options) : bundle_(bundle), ctx_(bundle.dir(), &bundle, std::move(options)) {}
  Bundle& bundle_;
  OpContext ctx_;
  double load_ms_ = 0;
};

}  // namespace deployc
