// A bundle opened for execution: config read and verified, every file checked against its sha256
// BEFORE any program is loaded (an XNNPACK program loaded without its data crashes the process).
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "config.h"
#include "failure.h"
#include "npy.h"
#include "static_decoder.h"

namespace executorch::extension::module {
class Module;
}

namespace deployc {

// How much of the bundle open() checks before anything loads. Full: every file's sha256 (what a first
// start, an install or a test does; ~0.6 ms per MB here). Sizes: every file present, programs and
// data files at their recorded sizes; for later starts of an app that checked the bundle in full once.
enum class Check { Full, Sizes };

class Bundle {
 public:
  static std::unique_ptr<Bundle> open(const std::string& dir, Failure& failure, Check check = Check::Full);
  ~Bundle();
  const RuntimeConfig& config() const { return config_; }
  const std::string& dir() const { return dir_; }

  // Runs program.method on inputs (checked against the declared dtypes and dynamic ranges first). A
  // decoder in the static form also answers "forward" (the decoder interface), through its driver.
  Failure run(const std::string& program, const std::string& method, const std::vector<Array>& inputs,
              std::vector<Array>& outputs, double* milliseconds = nullptr);
  // A declared method on inputs held by the caller, not copied (a static decoder's KV caches, tens of MB).
  Failure run(const std::string& program, const std::string& method, const std::vector<const Array*>& inputs,
              std::vector<Array>& outputs, double* milliseconds = nullptr);
  // The XNNPACK threadpool's size: open() applies the largest `threads` the config declares (0 leaves
  // the runtime's default, one thread per performant core); an app or --threads may override it.
  void set_threads(int threads);
  int threads() const;
  // Loads a method, sizing its planned memory from the config; runs the declared warm-up.
  Failure load(const std::string& program, const std::string& method, double* milliseconds = nullptr);
  // Programs loaded after this record ExecuTorch's profiling events (ETDump); write_etdump saves one
  // program's events so far (every call since it loaded, the declared warm-up included) to `path`.
  void trace_events() { trace_events_ = true; }
  Failure write_etdump(const std::string& program, const std::string& path);

 private:
  struct Loaded;
  Bundle() = default;
  Failure check_inputs(const ProgramSpec& p, const MethodSpec& m, const std::vector<const Array*>& inputs) const;
  // A loaded program's declared method: inputs checked, then executed.
  Failure call(const ProgramSpec& p, const MethodSpec& m, const std::vector<const Array*>& inputs,
               std::vector<Array>& outputs, double* milliseconds);
  std::string dir_;
  bool trace_events_ = false;
  RuntimeConfig config_;
  std::map<std::string, std::unique_ptr<Loaded>> loaded_;
  std::map<std::string, std::unique_ptr<StaticDecoding>> sessions_;  // per static decoder: its caches
};

// Runs one method of a loaded program on the given inputs (no checks against a config: Bundle::run makes
// those); `label` names the program in the failure.
Failure execute(executorch::extension::module::Module& module, const std::string& label, const std::string& method,
                const std::vector<const Array*>& inputs, std::vector<Array>& outputs);
// The same on inputs held in a vector.
Failure execute(executorch::extension::module::Module& module, const std::string& label, const std::string& method,
                const std::vector<Array>& inputs, std::vector<Array>& outputs);

}  // namespace deployc
