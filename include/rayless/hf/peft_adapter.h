// PEFT's adapter files (adapter_config.json + adapter_model.safetensors), both ways, for the LoRA
// adapters of model/lora.h.
#pragma once
#include <filesystem>
#include <string>

#include "rayless/model/lora.h"

namespace rayless {

// write_lora_adapter writes adapter_config.json and adapter_model.safetensors into dir
// (created if needed, each file atomically), tensor names
// "base_model.model.<module>.lora_A.weight". base_model: adapter_config's base_model_name_or_path.
void write_lora_adapter(const CausalLM& model, const LoraSettings& settings, const std::string& base_model,
                        const std::filesystem::path& dir);
bool is_lora_adapter_directory(const std::filesystem::path& dir);  // holds adapter_config.json
// adapter_config.json -> settings and base_model_name_or_path; InputError naming the file and key.
LoraSettings read_lora_config(const std::filesystem::path& dir, std::string* base_model = nullptr);
// Adds the adapters dir describes (when the model has none) and loads their weights; InputError for
// a missing, unexpected or mis-shaped tensor, naming the file.
void load_lora_adapter(CausalLM& model, const std::filesystem::path& dir);

}  // namespace rayless
