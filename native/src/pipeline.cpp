#include "pipeline.h"

#include <algorithm>
#include <chrono>

namespace deployc {

using nlohmann::json;

namespace {
double since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}
}  // namespace

std::unique_ptr<Pipeline> Pipeline::open(Bundle& bundle, Failure& failure, RunOptions options) {
  const auto& config = bundle.config();
  if (!config.has_pipeline) {
    failure = {2, "bundle has no pipeline"};
    return nullptr;
  }
  auto p = std::unique_ptr<Pipeline>(new Pipeline(bundle, std::move(options)));
  auto start = std::chrono::steady_clock::now();
  for (const auto& stage : config.stages) {
    if (!stage.program.empty())
      if ((failure = bundle.load(stage.program, stage.method))) return nullptr;
    json params = json::parse(stage.params_json, nullptr, false);
    if (params.is_object() && params.contains("tokenizer") && !p->ctx_.tokenizer(params.at("tokenizer"), failure)) {
      failure.message = "stage " + stage.name + " (" + stage.op + "): " + failure.message;
      return nullptr;
    }
  }
  p->load_ms_ = since(start);
  return p;
}

Failure Pipeline::run(const std::map<std::string, std::string>& texts, const std::map<std::string, Array>& tensors,
                      json& result) {
  const auto& config = bundle_.config();
  const RunOptions& options = ctx_.options();
  Values values;
  for (const auto& [k, v] : tensors) values[k] = v;
  for (const auto& [k, v] : texts) values[k] = v;
  json latency = json::object(), stages = json::object(), generation = json::object();
  bool reached = options.until.empty();
  if (texts.empty() && tensors.empty()) return {2, "give at least one pipeline input (--text or --file)"};
  for (const auto& [name, _] : texts)
    if (std::find(config.pipeline_inputs.begin(), config.pipeline_inputs.end(), name) == config.pipeline_inputs.end())
      return {2, "unknown pipeline input " + name};
  for (const auto& stage : config.stages) {
    Values args;
    bool ready = true;  // a stage whose inputs were not given (nor made) is skipped, as deployc run does
    for (const auto& item : stage.inputs) {
      auto eq = item.find('=');
      std::string port = item.substr(0, eq), ref = item.substr(eq + 1);
      if (!values.count(ref)) {
        ready = false;
        break;
      }
      args[port] = values[ref];
    }
    bool given_all = !stage.outputs.empty() && std::all_of(stage.outputs.begin(), stage.outputs.end(), [&](const auto& port) {
      return tensors.count(stage.name + "." + port) > 0;
    });
    if (!ready && !given_all) {
      if (stage.name == options.until) return {2, "--until " + stage.name + ": its inputs were not given"};
      continue;
    }
    Values out;
    auto start = std::chrono::steady_clock::now();
    if (given_all) {
      for (const auto& port : stage.outputs) out[port] = tensors.at(stage.name + "." + port);
    } else {
      auto op = op_table().find(stage.op);
      if (op == op_table().end())
        return {2, "stage " + stage.name + ": op " + stage.op + " is unknown to this runner (a newer bundle?)"};
      ctx_.figures = json::object();
      if (Failure f = op->second(ctx_, stage, json::parse(stage.params_json), args, out)) return f;
      if (!ctx_.figures.empty()) generation = ctx_.figures;
    }
    latency[stage.name] = since(start);
    json stage_json = json::object();
    for (const auto& [port, v] : out) {
      values[stage.name + "." + port] = v;
      stage_json[port] = to_json(v);
    }
    stages[stage.name] = stage_json;
    if (stage.name == options.until) {
      reached = true;
      break;
    }
  }
  if (!reached) return {2, "--until " + options.until + ": no such stage"};
  json outputs = json::object();
  if (options.until.empty()) {
    for (const auto& item : config.pipeline_outputs) {
      auto eq = item.find('=');
      if (values.count(item.substr(eq + 1))) outputs[item.substr(0, eq)] = to_json(values[item.substr(eq + 1)]);
    }
    if (outputs.empty()) return {2, "no pipeline output can be computed from the inputs given"};
  }
  result = {{"outputs", outputs}, {"stages", stages}, {"latency_ms", latency}, {"load_ms", load_ms_},
            {"generation", generation}};
  return {};
}

}  // namespace deployc
