// deployc-runner: the native reference runner for deployc bundles.
//
//   deployc-runner BUNDLE                                   verify the bundle, print what it holds
//   deployc-runner BUNDLE --program NAME [--method M] --input A.npy [--input B.npy ...]
//                         [--output-dir DIR] [--repeat N]   run one method, write output_<i>.npy
//                         [--etdump FILE.etdp]             and save ExecuTorch's profiling events (ETDump)
//   deployc-runner BUNDLE --pipeline --text INPUT=VALUE ... [--file INPUT=PATH ...] [--set STAGE.PORT=FILE.npy ...]
//                         [--until STAGE] [--stream]        run the pipeline graph, print JSON (--file: an
//                                                           image or audio input; inputs left out skip the
//                                                           stages that need them; --stream: generated text
//                                                           to stderr as it comes)
//   deployc-runner BUNDLE --self-test                       every program on its self-test vectors (exit 1 on a miss)
//   deployc-runner --measure PROGRAM.pte VECTORS.json [--data PROGRAM.ptd]
//                                                           one program on self-test vectors, without a bundle:
//                                                           worst cosine/SQNR/max-abs (and text measures) as JSON
//   deployc-runner --raw PROGRAM.pte --input A.npy ...     the anchor: a bare ExecuTorch Module load and one
//                                                           call, no bundle, no checks (benchmarks/load_bench.py)
//   any of these: [--threads N]                             override the config's XNNPACK thread count
//                 [--quick-check]                           check files by size, not sha256 (a later start)
//   deployc-runner --preprocess STEPS.json FILE --out OUT.npy
//                                                           an image or audio stage's steps on one file
//   deployc-runner --tokenize TOKENIZER --strings FILE.json [--max-length N] [--no-special]
//                                                           ids and decoded text of each string, as JSON
//   deployc-runner --op VECTOR.json                         one op on a conformance vector's inputs (its files
//                                                           beside it), outputs as JSON (tests/conformance/)
//
// Exit codes: 0 ok, 1 the runtime failed, 2 bad bundle or bad input.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include <fstream>

#include <executorch/extension/module/module.h>
#include <executorch/extension/tensor/tensor.h>

#include "bundle.h"
#include "ops.h"
#include "pipeline.h"
#include "preprocess.h"
#include "self_test.h"
#include "tokenizer.h"

using namespace deployc;

namespace {
int usage() {
  std::cerr << "usage: deployc-runner BUNDLE [--program NAME [--method M] --input FILE.npy ... [--output-dir DIR] "
               "[--repeat N] [--etdump FILE.etdp]] [--pipeline [--text NAME=VALUE] [--file NAME=PATH] [--set STAGE.PORT=FILE.npy] [--until STAGE] [--stream]] "
               "[--self-test] [--threads N] [--quick-check]\n       deployc-runner --op VECTOR.json\n       deployc-runner --measure PROGRAM.pte VECTORS.json [--data PROGRAM.ptd]\n       deployc-runner --tokenize TOKENIZER --strings FILE.json [--max-length N] "
               "[--no-special]\n";
  return 2;
}

int report(const Failure& f) {
  std::cerr << "error: " << f.message << "\n";
  return f.exit_code;
}

// A conformance vector's input: text, a tensor {dtype, shape, data}, a file beside the vector {file} (its
// bytes: an image or audio input) or retrieved chunks {chunks: [{id, source, text, score}]}.
Failure vector_value(const nlohmann::json& v, const std::string& root, Value& out) {
  if (v.is_string()) {
    out = v.get<std::string>();
  } else if (v.is_object() && v.contains("file")) {
    std::ifstream in(root + "/" + v.at("file").get<std::string>(), std::ios::binary);
    if (!in) return {2, "cannot read " + v.at("file").get<std::string>()};
    out = std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  } else if (v.is_object() && v.contains("chunks")) {
    std::vector<Chunk> chunks;
    for (const auto& c : v.at("chunks"))
      chunks.push_back(Chunk{c.at("id"), c.at("source"), c.at("text"), c.at("score")});
    out = chunks;
  } else if (v.is_object() && v.contains("dtype")) {
    Array a{v.at("dtype"), v.at("shape").get<std::vector<int64_t>>(), {}};
    a.data.resize(a.numel() * dtype_size(a.dtype));
    const auto& data = v.at("data");
    if (data.size() != a.numel()) return {2, "tensor data holds " + std::to_string(data.size()) + " values"};
    for (size_t i = 0; i < a.numel(); ++i) {
      if (a.dtype == "float32") reinterpret_cast<float*>(a.data.data())[i] = data[i].get<float>();
      else if (a.dtype == "int64") reinterpret_cast<int64_t*>(a.data.data())[i] = data[i].get<int64_t>();
      else reinterpret_cast<int32_t*>(a.data.data())[i] = data[i].get<int32_t>();
    }
    out = a;
  } else {
    return {2, "an input must be text, {dtype, shape, data}, {file} or {chunks}"};
  }
  return {};
}

// One op of the table on a conformance vector, outside any bundle: {op, params, inputs} in, {outputs} out.
int run_op(int argc, char** argv) {
  if (argc != 3) return usage();
  std::string path = argv[2];
  std::ifstream in(path);
  nlohmann::json vector = nlohmann::json::parse(in, nullptr, false);
  if (vector.is_discarded() || !vector.is_object()) return report({2, path + ": not a JSON object"});
  std::string root = path.find('/') == std::string::npos ? "." : path.substr(0, path.find_last_of('/'));
  auto op = op_table().find(vector.value("op", std::string()));
  if (op == op_table().end()) return report({2, path + ": op " + vector.value("op", std::string()) + " is unknown"});
  StageSpec stage{"conformance", op->first, "", "", vector.at("params").dump(), {}, {}};
  Values args, out;
  for (const auto& [port, v] : vector.at("inputs").items())
    if (Failure f = vector_value(v, root, args[port])) return report({f.exit_code, port + ": " + f.message});
  OpContext ctx(root, nullptr, {});
  if (Failure f = op->second(ctx, stage, vector.at("params"), args, out)) return report(f);
  nlohmann::json outputs = nlohmann::json::object();
  for (const auto& [port, v] : out) outputs[port] = to_json(v);
  std::cout << nlohmann::json{{"outputs", outputs}}.dump(2, ' ', false, nlohmann::json::error_handler_t::replace)
            << "\n";
  return 0;
}

// Tokenizes a JSON array of strings: how the parity tests and the benchmark drive the native tokenizers.
int tokenize(int argc, char** argv) {
  std::string path = argc > 2 ? argv[2] : "", strings;
  size_t max_length = 0;
  bool special = true;
  for (int i = 3; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--strings" && i + 1 < argc) strings = argv[++i];
    else if (a == "--max-length" && i + 1 < argc) max_length = static_cast<size_t>(std::atol(argv[++i]));
    else if (a == "--no-special") special = false;
    else return usage();
  }
  if (path.empty() || strings.empty()) return usage();
  Failure f;
  auto tk = Tokenizer::open(path, f);
  if (!tk) return report(f);
  std::ifstream in(strings);
  nlohmann::json texts = nlohmann::json::parse(in, nullptr, false);
  if (texts.is_discarded() || !texts.is_array()) return report({2, strings + ": not a JSON array of strings"});
  nlohmann::json ids = nlohmann::json::array(), decoded = nlohmann::json::array();
  auto start = std::chrono::steady_clock::now();
  for (const auto& t : texts) {
    std::vector<int64_t> out;
    if (Failure ef = tk->encode(t.get<std::string>(), special, max_length, out)) return report(ef);
    ids.push_back(out);
  }
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  for (const auto& row : ids) decoded.push_back(tk->decode(row.get<std::vector<int64_t>>()));
  nlohmann::json result = {{"kind", tk->kind()}, {"ids", ids}, {"text", decoded}, {"encode_ms", ms}};
  std::cout << result.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  return 0;
}
// Runs image or audio preprocessing steps on one file, no bundle: how the parity tests drive it.
int preprocess(int argc, char** argv) {
  if (argc != 6 || std::string(argv[4]) != "--out") return usage();
  std::ifstream steps_in(argv[2]), file_in(argv[3], std::ios::binary);
  nlohmann::json steps = nlohmann::json::parse(steps_in, nullptr, false);
  if (steps.is_discarded() || !steps.is_array() || steps.empty()) return report({2, std::string(argv[2]) + ": not a JSON array of steps"});
  if (!file_in) return report({2, std::string(argv[3]) + ": cannot read the file"});
  const std::string bytes((std::istreambuf_iterator<char>(file_in)), {});
  Array out;
  const bool image = steps.at(0).value("op", "") == "decode";
  if (Failure f = image ? image_steps(bytes, steps, out) : audio_steps(bytes, steps, out)) return report(f);
  std::string err = write_npy(argv[5], out);
  return err.empty() ? 0 : report({1, err});
}

double ms_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

// deployc's check of a program on this runtime's kernels: measures, prints JSON, judges nothing.
int measure(int argc, char** argv) {
  if (argc != 4 && !(argc == 6 && std::string(argv[4]) == "--data")) return usage();
  nlohmann::json result;
  if (Failure f = measure_program(argv[2], argc == 6 ? argv[5] : "", argv[3], result)) return report(f);
  std::cout << result.dump() << "\n";
  return 0;
}

// The anchor for load timings: what a minimal app does with a .pte and nothing else.
int raw(int argc, char** argv) {
  using executorch::extension::Module;
  if (argc < 3) return usage();
  std::vector<Array> inputs;
  for (int i = 3; i + 1 < argc; i += 2) {
    if (std::string(argv[i]) != "--input") return usage();
    inputs.emplace_back();
    std::string err = read_npy(argv[i + 1], inputs.back());
    if (!err.empty()) return report({2, err});
  }
  auto start = std::chrono::steady_clock::now();
  Module module(argv[2], Module::LoadMode::Mmap);
  if (module.load_method("forward") != executorch::runtime::Error::Ok) return report({1, "load failed"});
  double load_ms = ms_since(start);
  std::vector<executorch::extension::TensorPtr> tensors;
  std::vector<executorch::runtime::EValue> values;
  for (auto& a : inputs) {
    std::vector<executorch::aten::SizesType> sizes(a.shape.begin(), a.shape.end());
    auto type = a.dtype == "int64" ? executorch::aten::ScalarType::Long : executorch::aten::ScalarType::Float;
    tensors.push_back(executorch::extension::make_tensor_ptr(sizes, a.data.data(), type));
    values.emplace_back(*tensors.back());
  }
  auto t = std::chrono::steady_clock::now();
  if (!module.execute("forward", values).ok()) return report({1, "execution failed"});
  std::printf("{\"load_ms\": %.4f, \"first_ms\": %.4f, \"ready_ms\": %.4f}\n", load_ms, ms_since(t), ms_since(start));
  return 0;
}
}  // namespace

int main(int argc, char** argv) {
  auto started = std::chrono::steady_clock::now();
  if (argc < 2) return usage();
  if (std::string(argv[1]) == "--raw") return raw(argc, argv);
  if (std::string(argv[1]) == "--tokenize") return tokenize(argc, argv);
  if (std::string(argv[1]) == "--preprocess") return preprocess(argc, argv);
  if (std::string(argv[1]) == "--op") return run_op(argc, argv);
  if (std::string(argv[1]) == "--measure") return measure(argc, argv);
  std::string dir = argv[1], program, method = "forward", output_dir, until, etdump;
  std::vector<std::string> input_files;
  std::map<std::string, Array> sets;
  std::map<std::string, std::string> texts;
  bool pipeline = false, stream = false, check = false, quick = false;
  int repeat = 1, threads = 0;
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--program") program = next();
    else if (a == "--method") method = next();
    else if (a == "--input") input_files.push_back(next());
    else if (a == "--output-dir") output_dir = next();
    else if (a == "--repeat") repeat = std::max(1, std::atoi(next().c_str()));
    else if (a == "--etdump") etdump = next();
    else if (a == "--pipeline") pipeline = true;
    else if (a == "--until") until = next();
    else if (a == "--stream") stream = true;
    else if (a == "--self-test") check = true;
    else if (a == "--quick-check") quick = true;
    else if (a == "--threads") threads = std::atoi(next().c_str());
    else if (a == "--file") {  // an image or audio input: the file's bytes
      std::string kv = next();
      auto eq = kv.find('=');
      if (eq == std::string::npos) return usage();
      std::ifstream in(kv.substr(eq + 1), std::ios::binary);
      if (!in) return report({2, "--file " + kv + ": cannot read the file"});
      texts[kv.substr(0, eq)] = std::string(std::istreambuf_iterator<char>(in), {});
    } else if (a == "--set" || a == "--text") {
      std::string kv = next();
      auto eq = kv.find('=');
      if (eq == std::string::npos) return usage();
      if (a == "--text") {
        texts[kv.substr(0, eq)] = kv.substr(eq + 1);
      } else {
        Array arr;
        std::string err = read_npy(kv.substr(eq + 1), arr);
        if (!err.empty()) return report({2, err});
        sets[kv.substr(0, eq)] = arr;
      }
    } else return usage();
  }
  Failure f;
  auto bundle = Bundle::open(dir, f, quick ? Check::Sizes : Check::Full);
  if (!bundle) return report(f);
  if (threads > 0) bundle->set_threads(threads);
  if (!etdump.empty()) {
    if (program.empty() || pipeline || check)
      return report({2, "--etdump records one program's calls: give it with --program NAME (not --pipeline or --self-test)"});
    bundle->trace_events();
  }
  const auto& c = bundle->config();
  if (check) {
    nlohmann::json result;
    if (Failure sf = self_test(*bundle, result)) return report(sf);
    std::cout << result.dump(2) << "\n";
    return result["passed"].get<bool>() ? 0 : 1;
  }
  if (pipeline) {
    RunOptions options{until, nullptr};
    if (stream) options.on_text = [](const std::string& piece) { std::cerr << piece << std::flush; };
    auto p = Pipeline::open(*bundle, f, options);
    if (!p) return report(f);
    nlohmann::json result;
    if (Failure pf = p->run(texts, sets, result)) return report(pf);
    if (const auto& g = result["generation"]; stream && g.contains("decode_tokens_per_s"))
      std::fprintf(stderr, "\n[prefill %lld tokens at %.1f tok/s; decode %lld tokens at %.1f tok/s]\n",
                   g["prompt_tokens"].get<long long>(), g["prefill_tokens_per_s"].get<double>(),
                   g["tokens"].get<long long>(), g["decode_tokens_per_s"].get<double>());
    result["threads"] = bundle->threads();
    std::cout << result.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    return 0;
  }
  if (program.empty()) {
    std::cout << c.name << " " << c.version << " for " << c.target << " (schema " << c.schema_version << "): "
              << c.programs.size() << " program(s), " << c.assets.size() << " asset(s), all sha256 ok\n";
    for (const auto& p : c.programs)
      for (const auto& m : p.methods)
        std::cout << "  " << p.name << "." << m.name << ": " << p.backend << " " << p.quantization << ", "
                  << m.inputs.size() << " input(s), planned " << m.planned_memory_bytes << " B\n";
    return 0;
  }
  std::vector<Array> inputs, outputs;
  for (const auto& file : input_files) {
    Array a;
    std::string err = read_npy(file, a);
    if (!err.empty()) return report({2, err});
    inputs.push_back(a);
  }
  double load_ms = 0;
  if (Failure lf = bundle->load(program, method, &load_ms)) return report(lf);
  std::vector<double> times;
  double ready_ms = 0;  // from before the bundle was opened (every sha256 checked) to the first output
  for (int r = 0; r < repeat; ++r) {
    double ms = 0;
    if (Failure rf = bundle->run(program, method, inputs, outputs, &ms)) return report(rf);
    if (r == 0) ready_ms = ms_since(started);
    times.push_back(ms);
  }
  double first_ms = times[0];
  std::sort(times.begin(), times.end());
  std::printf("{\"program\": \"%s\", \"method\": \"%s\", \"load_ms\": %.4f, \"first_ms\": %.4f, \"median_ms\": %.4f, "
              "\"ready_ms\": %.4f, \"outputs\": %zu, \"threads\": %d}\n", program.c_str(), method.c_str(), load_ms,
              first_ms, times[times.size() / 2], ready_ms, outputs.size(), bundle->threads());
  if (!etdump.empty())
    if (Failure ef = bundle->write_etdump(program, etdump)) return report(ef);
  if (!output_dir.empty())
    for (size_t i = 0; i < outputs.size(); ++i) {
      std::string err = write_npy(output_dir + "/output_" + std::to_string(i) + ".npy", outputs[i]);
      if (!err.empty()) return report({1, err});
    }
  return 0;
}
