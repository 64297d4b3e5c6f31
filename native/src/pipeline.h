// Executes a bundle's pipeline graph natively for the stages that need no Python: model calls,
// vector_search over the bundle's index, template. Tokenization and generation need a tokenizer the
// ExecuTorch C++ runtime in the wheel cannot load for these files (BertNormalizer): callers pass
// token ids for tokenize stages (--set), and stop before generate (--until).
#pragma once
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "bundle.h"

namespace deployc {

Failure run_pipeline(Bundle& bundle, const std::map<std::string, Array>& tensors,
                     const std::map<std::string, std::string>& texts, const std::string& until,
                     nlohmann::json& result);

}  // namespace deployc
