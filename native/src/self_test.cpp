#include "self_test.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>
#include <limits>

#include <executorch/extension/module/module.h>

namespace deployc {

using nlohmann::json;

using RunMethod = std::function<Failure(const std::string&, const std::vector<Array>&, std::vector<Array>&)>;

namespace {
constexpr double kExactSqnrDb = 300.0;  // as the Python side reports bit-exact outputs

bool base64_decode(const std::string& in, std::vector<uint8_t>& out) {
  static const std::string chars = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  uint32_t acc = 0;
  int bits = 0;
  for (char c : in) {
    if (c == '=') break;
    auto pos = chars.find(c);
    if (pos == std::string::npos) return false;
    acc = (acc << 6) | static_cast<uint32_t>(pos);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<uint8_t>((acc >> bits) & 0xFF));
    }
  }
  return true;
}

bool to_array(const json& t, Array& a) {
  a.dtype = t.at("dtype").get<std::string>();
  a.shape = t.at("shape").get<std::vector<int64_t>>();
  if (!base64_decode(t.at("data").get<std::string>(), a.data)) return false;
  return dtype_size(a.dtype) > 0 && a.data.size() == a.numel() * dtype_size(a.dtype);
}

double value(const Array& a, size_t i) {
  if (a.dtype == "float32") return a.as<float>()[i];
  if (a.dtype == "int64") return static_cast<double>(a.as<int64_t>()[i]);
  return a.as<int32_t>()[i];
}

struct Metrics {
  double max_abs = 0, cosine = 1, sqnr_db = kExactSqnrDb;
};

// The same formulas as deployc/graph/metrics.py's compare().
Metrics compare(const Array& ref, const Array& out) {
  Metrics m;
  double dot = 0, nr = 0, no = 0, noise = 0;
  for (size_t i = 0; i < ref.numel(); ++i) {
    double r = value(ref, i), o = value(out, i), d = r - o;
    dot += r * o;
    nr += r * r;
    no += o * o;
    noise += d * d;
    m.max_abs = std::max(m.max_abs, std::fabs(d));
  }
  if (nr == 0 && no == 0) m.cosine = 1;
  else if (nr == 0 || no == 0) m.cosine = 0;
  else m.cosine = dot / (std::sqrt(nr) * std::sqrt(no));
  m.cosine = std::isfinite(m.cosine) ? std::min(m.cosine, 1.0) : -1.0;
  if (noise == 0) m.sqnr_db = kExactSqnrDb;
  else if (nr == 0) m.sqnr_db = -kExactSqnrDb;
  else m.sqnr_db = std::max(-kExactSqnrDb, std::min(kExactSqnrDb, 10.0 * std::log10(nr / noise)));
  if (!std::isfinite(m.sqnr_db)) m.sqnr_db = -kExactSqnrDb;
  if (!std::isfinite(m.max_abs)) m.max_abs = std::numeric_limits<double>::max();
  return m;
}
// How far eager's first choice must lead its second (nats) for top-1 agreement to count there:
// deployc/core/facts.py's TOP1_MARGIN.
constexpr double kTop1Margin = 0.1;

// A decoder on held-out text: the same formulas as deployc/graph/metrics.py's text_metrics().
struct TextMetrics {
  int positions = 0;
  double nll = 0, ref_nll = 0, kl = 0;
  int agree = 0, clear = 0;
  void add(const Array& ref, const Array& out, int64_t target) {
    size_t n = ref.numel();
    std::vector<double> lr(n), lg(n);
    auto log_softmax = [n](const Array& a, std::vector<double>& l) {
      double top = -std::numeric_limits<double>::infinity();
      for (size_t i = 0; i < n; ++i) top = std::max(top, value(a, i));
      double sum = 0;
      for (size_t i = 0; i < n; ++i) sum += std::exp(value(a, i) - top);
      for (size_t i = 0; i < n; ++i) l[i] = value(a, i) - top - std::log(sum);
    };
    log_softmax(ref, lr);
    log_softmax(out, lg);
    size_t best_r = 0, best_g = 0;
    for (size_t i = 0; i < n; ++i) {
      kl += std::exp(lr[i]) * (lr[i] - lg[i]);
      if (lr[i] > lr[best_r]) best_r = i;
      if (lg[i] > lg[best_g]) best_g = i;
    }
    double second = -std::numeric_limits<double>::infinity();
    for (size_t i = 0; i < n; ++i)
      if (i != best_r) second = std::max(second, lr[i]);
    nll -= lg[static_cast<size_t>(target)];
    ref_nll -= lr[static_cast<size_t>(target)];
    if (lr[best_r] - second >= kTop1Margin) {  // eager's first choice is clear: agreement means something
      ++clear;
      agree += best_r == best_g;
    }
    ++positions;
  }
  double perplexity() const { return std::exp(nll / positions); }
  double reference_perplexity() const { return std::exp(ref_nll / positions); }
  double mean_kl() const { return std::max(kl / positions, 0.0); }
  double top1() const { return clear ? static_cast<double>(agree) / clear : 1.0; }
};

// The manifest's task samples: the same formulas as deployc/graph/metrics.py's task_metrics().
struct TaskMeasure {
  std::string measure;  // top1 or topk; empty: no task samples
  int k = 0;
  std::vector<std::vector<double>> refs, outs;  // each sample's first output, eager's and the program's
  size_t last = 1;                              // top1: the classes axis (the last)
  void add(const Array& ref, const Array& out) {
    std::vector<double> r(ref.numel()), o(out.numel());
    for (size_t i = 0; i < r.size(); ++i) r[i] = value(ref, i);
    for (size_t i = 0; i < o.size(); ++i) o[i] = value(out, i);
    last = ref.shape.empty() ? 1 : static_cast<size_t>(ref.shape.back());
    refs.push_back(std::move(r));
    outs.push_back(std::move(o));
  }
  size_t samples() const { return refs.size(); }
  // Share of rows (over the last axis) whose argmax agree, averaged per sample, then over samples.
  double top1() const {
    double total = 0;
    for (size_t s = 0; s < refs.size(); ++s) {
      size_t rows = refs[s].size() / last, agree = 0;
      for (size_t row = 0; row < rows; ++row) {
        auto r = refs[s].begin() + row * last, o = outs[s].begin() + row * last;
        agree += std::max_element(r, r + last) - r == std::max_element(o, o + last) - o;
      }
      total += rows ? static_cast<double>(agree) / rows : 0.0;
    }
    return refs.empty() ? 0.0 : total / refs.size();
  }
  // Each sample's other samples by cosine, most similar first (ties: lower index first).
  static std::vector<std::vector<size_t>> ranked(const std::vector<std::vector<double>>& vectors) {
    size_t n = vectors.size();
    std::vector<std::vector<double>> unit = vectors;
    for (auto& v : unit) {
      double norm = 0;
      for (double x : v) norm += x * x;
      norm = std::max(std::sqrt(norm), 1e-12);
      for (double& x : v) x /= norm;
    }
    std::vector<std::vector<size_t>> order(n);
    for (size_t i = 0; i < n; ++i) {
      std::vector<double> score(n);
      for (size_t j = 0; j < n; ++j) {
        double dot = 0;
        for (size_t d = 0; d < unit[i].size(); ++d) dot += unit[i][d] * unit[j][d];
        score[j] = dot;
      }
      for (size_t j = 0; j < n; ++j)
        if (j != i) order[i].push_back(j);
      std::stable_sort(order[i].begin(), order[i].end(), [&](size_t a, size_t b) { return score[a] > score[b]; });
    }
    return order;
  }
  bool finite() const {
    for (const auto& o : outs)
      for (double x : o)
        if (!std::isfinite(x)) return false;
    return true;
  }
  // (k used, overlap, mean rank change)
  void topk(int& used, double& overlap, double& moved) const {
    size_t n = refs.size();
    used = static_cast<int>(std::min(static_cast<size_t>(k), n - 1));
    auto eager = ranked(refs), program = ranked(outs);
    overlap = moved = 0;
    for (size_t i = 0; i < n; ++i) {
      std::vector<size_t> position(n, 0);
      for (size_t r = 0; r < program[i].size(); ++r) position[program[i][r]] = r;
      size_t both = 0;
      double shift = 0;
      for (int r = 0; r < used; ++r) {
        size_t want = eager[i][static_cast<size_t>(r)];
        both += std::find(program[i].begin(), program[i].begin() + used, want) != program[i].begin() + used;
        shift += std::fabs(static_cast<double>(position[want]) - r);
      }
      overlap += static_cast<double>(both) / used;
      moved += shift / used;
    }
    overlap /= n;
    moved /= n;
  }
};

// The program on every case of a self-test document: worst cosine/SQNR/max-abs over the plain cases, the
// text measures over the held-out text cases. Stops at the first run that fails (`run_failure`) or the
// first case the outputs do not fit (`failure`). A Failure only for vectors that cannot be read.
struct Measured {
  Metrics worst{0, 1, kExactSqnrDb};
  TextMetrics text;
  TaskMeasure task;
  int cases = 0;
  Failure run_failure;
  std::string failure;
};

Failure measure(const RunMethod& run, const json& doc, const std::string& file, Measured& m) {
  int version = doc.is_discarded() ? 0 : doc.value("schema_version", 0);
  if (doc.is_discarded() || version < 1 || version > 3 || !doc.contains("cases"))
    return {2, "self-test: " + file + " is unreadable or of an unknown schema version"};
  for (const auto& c : doc.at("cases")) {
    std::vector<Array> inputs, expected, outputs;
    for (const auto& t : c.at("inputs")) {
      inputs.emplace_back();
      if (!to_array(t, inputs.back())) return {2, "self-test: " + file + ": a damaged input tensor"};
    }
    for (const auto& t : c.at("expected")) {
      expected.emplace_back();
      if (!to_array(t, expected.back())) return {2, "self-test: " + file + ": a damaged output tensor"};
    }
    if ((m.run_failure = run(c.at("method").get<std::string>(), inputs, outputs))) {
      m.failure = m.run_failure.message;
      return {};
    }
    if (outputs.size() != expected.size()) {
      m.failure = std::to_string(outputs.size()) + " outputs, the vectors hold " + std::to_string(expected.size());
      return {};
    }
    if (c.contains("target")) {  // held-out text: judged as a next-token distribution
      int64_t target = c.at("target").get<int64_t>();
      if (outputs.empty() || outputs[0].numel() != expected[0].numel() || target < 0 ||
          static_cast<size_t>(target) >= expected[0].numel()) {
        m.failure = "a held-out text case does not fit the program's logits";
        return {};
      }
      m.text.add(expected[0], outputs[0], target);
      ++m.cases;
      continue;
    }
    if (c.contains("task")) {  // a task sample: judged with the others, by the task measure
      if (outputs.empty() || outputs[0].numel() != expected[0].numel()) {
        m.failure = "a task sample's output does not fit the program's";
        return {};
      }
      m.task.measure = c.at("task").at("measure").get<std::string>();
      m.task.k = c.at("task").value("k", 0);
      m.task.add(expected[0], outputs[0]);
      ++m.cases;
      continue;
    }
    for (size_t i = 0; i < outputs.size(); ++i) {
      if (outputs[i].numel() != expected[i].numel()) {
        m.failure = "output " + std::to_string(i) + " has " + std::to_string(outputs[i].numel()) + " values, " +
                    std::to_string(expected[i].numel()) + " expected";
        return {};
      }
      Metrics one = compare(expected[i], outputs[i]);
      m.worst.max_abs = std::max(m.worst.max_abs, one.max_abs);
      m.worst.cosine = std::min(m.worst.cosine, one.cosine);
      m.worst.sqnr_db = std::min(m.worst.sqnr_db, one.sqnr_db);
    }
    ++m.cases;
  }
  return {};
}

void put_measures(const Measured& m, json& row) {
  row["cases"] = m.cases;
  row["min_cosine"] = m.worst.cosine;
  row["min_sqnr_db"] = m.worst.sqnr_db;
  row["max_abs"] = m.worst.max_abs;
  if (m.text.positions > 0)
    row["text"] = {{"positions", m.text.positions}, {"perplexity", m.text.perplexity()},
                   {"reference_perplexity", m.text.reference_perplexity()}, {"kl", m.text.mean_kl()},
                   {"top1", m.text.top1()}, {"top1_positions", m.text.clear}};
  if (m.task.samples() > 1 && m.task.measure == "topk" && m.task.finite()) {
    int k = 0;
    double overlap = 0, moved = 0;
    m.task.topk(k, overlap, moved);
    row["task"] = {{"samples", m.task.samples()}, {"measure", "topk"}, {"k", k}, {"topk_overlap", overlap},
                   {"mean_rank_change", moved}};
  } else if (m.task.samples() > 0 && m.task.measure == "top1") {
    row["task"] = {{"samples", m.task.samples()}, {"measure", "top1"}, {"top1", m.task.top1()}};
  }
}
}  // namespace

Failure self_test(Bundle& bundle, json& result) {
  const auto& config = bundle.config();
  json programs = json::array();
  bool passed = true;
  for (const auto& p : config.programs) {
    json row = {{"program", p.name}, {"backend", p.backend}, {"status", "not-run"}, {"reason", ""}, {"cases", 0},
                {"tolerance_min_cosine", p.tolerance_min_cosine}, {"tolerance_min_sqnr_db", p.tolerance_min_sqnr_db}};
    const AssetSpec* vectors = nullptr;
    for (const auto& a : config.assets)
      if (a.kind == "self_test" && a.name == p.name + ".self_test") vectors = &a;
    if (!vectors) {
      row["reason"] = "no self-test vectors in the bundle";
    } else if (p.backend == "litert") {
      row["reason"] = "not run by this runner: a LiteRT program (.tflite); `deployc inspect --self-test` runs it "
                      "on the host's LiteRT interpreter";
    } else if (p.backend != "xnnpack" && p.backend != "portable" && p.backend != "qnn") {
      row["reason"] = "not run on this host: this runner has no " + p.backend + " delegate";
    } else {
      std::ifstream in(bundle.dir() + "/" + vectors->file);
      Measured m;
      auto run = [&](const std::string& method, const std::vector<Array>& inputs, std::vector<Array>& outputs) {
        return bundle.run(p.name, method, inputs, outputs);
      };
      if (Failure f = measure(run, json::parse(in, nullptr, false), vectors->file, m)) return f;
      if (m.run_failure.exit_code == 2 && p.backend == "qnn") {  // no QNN libraries on this host
        row["reason"] = "not run on this host: " + m.run_failure.message;
      } else if (!m.failure.empty()) {
        row["cases"] = m.cases;
        row["status"] = "failed";
        row["reason"] = m.failure;
      } else {
        put_measures(m, row);
        std::string missed;
        auto add = [&missed](const std::string& what) { missed += (missed.empty() ? "" : "; ") + what; };
        if (m.worst.cosine < p.tolerance_min_cosine)
          add("cosine " + std::to_string(m.worst.cosine) + " < " + std::to_string(p.tolerance_min_cosine));
        if (m.worst.sqnr_db < p.tolerance_min_sqnr_db)
          add("SQNR " + std::to_string(m.worst.sqnr_db) + " dB < " + std::to_string(p.tolerance_min_sqnr_db) + " dB");
        const TextMetrics& text = m.text;
        if (text.positions > 0) {
          if (!std::isfinite(text.perplexity())) add("the program's logits are not finite on the held-out text");
          // KL and top-1 (deployc/graph/metrics.py, judge_self_test_text): perplexity over a few positions is a
          // sample of their targets; the build judged it on the whole held-out text.
          if (p.tolerance_max_perplexity_ratio > 0) {
            if (text.mean_kl() > p.tolerance_max_kl)
              add("KL " + std::to_string(text.mean_kl()) + " > " + std::to_string(p.tolerance_max_kl));
            if (text.top1() < p.tolerance_min_top1)
              add("top-1 agreement " + std::to_string(text.top1()) + " < " + std::to_string(p.tolerance_min_top1));
          }
        }
        if (m.task.measure == "topk" && !m.task.finite())
          add("the program's embeddings are not finite on the task samples");
        if (row.contains("task")) {
          const json& t = row["task"];
          if (t.contains("top1") && p.tolerance_min_top1 > 0 && t["top1"].get<double>() < p.tolerance_min_top1)
            add("top-1 agreement with eager on the task samples " + std::to_string(t["top1"].get<double>()) + " < " +
                std::to_string(p.tolerance_min_top1));
          if (t.contains("topk_overlap") && p.tolerance_min_topk_overlap > 0 &&
              t["topk_overlap"].get<double>() < p.tolerance_min_topk_overlap)
            add("top-" + std::to_string(t["k"].get<int>()) + " neighbour overlap with eager on the task samples " +
                std::to_string(t["topk_overlap"].get<double>()) + " < " + std::to_string(p.tolerance_min_topk_overlap));
        }
        row["status"] = missed.empty() ? "passed" : "failed";
        row["reason"] = missed;
      }
    }
    if (row["status"] == "failed") passed = false;
    programs.push_back(row);
  }
  result = {{"passed", passed}, {"programs", programs}};
  return {};
}

Failure measure_program(const std::string& pte, const std::string& data, const std::string& vectors, json& result) {
  using executorch::extension::Module;
  std::ifstream in(vectors);
  if (!in) return {2, "self-test vectors " + vectors + ": cannot read the file"};
  auto module = data.empty() ? std::make_unique<Module>(pte, Module::LoadMode::Mmap)
                             : std::make_unique<Module>(pte, data, Module::LoadMode::Mmap);
  if (module->load() != executorch::runtime::Error::Ok) return {1, pte + ": the runtime cannot load the program"};
  Measured m;
  auto run = [&](const std::string& method, const std::vector<Array>& inputs, std::vector<Array>& outputs) {
    return execute(*module, "program", method, inputs, outputs);
  };
  if (Failure f = measure(run, json::parse(in, nullptr, false), vectors, m)) return f;
  result = {{"status", m.failure.empty() ? "measured" : "failed"}, {"reason", m.failure}};
  put_measures(m, result);
  return {};
}

}  // namespace deployc
