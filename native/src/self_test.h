// Self-test vectors (the bundle's selftest/<program>.json assets, docs/bundle.md): each program run on
// the stored inputs, its outputs compared with the stored eager outputs by cosine and SQNR against the
// tolerances the build verified. What an app runs on first start to check the device.
#pragma once
#include <nlohmann/json.hpp>

#include "bundle.h"

namespace deployc {

// result: {"passed": bool, "programs": [{program, backend, status, reason, cases, min_cosine,
// min_sqnr_db, max_abs, tolerance_min_cosine, tolerance_min_sqnr_db}]}. A Failure only for a
// bundle the check cannot read; a program that misses its tolerance is status "failed".
Failure self_test(Bundle& bundle, nlohmann::json& result);

// One program file (and its external weights, if any) on a self-test vectors file, without a bundle or a
// judgement: how deployc's build checks a program on another architecture's runtime (arm64 under qemu).
// result: {"status": "measured"|"failed", "reason", "cases", "min_cosine", "min_sqnr_db", "max_abs", "text"?}.
Failure measure_program(const std::string& pte, const std::string& data, const std::string& vectors,
                        nlohmann::json& result);

}  // namespace deployc
