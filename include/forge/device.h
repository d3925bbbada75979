#pragma once
// Where bytes live and kernels run: the host CPU or one CUDA device.

#include <cstdint>
#include <string>

namespace forge {

enum class DeviceType : std::uint8_t { cpu, cuda };

struct Device {
  DeviceType type = DeviceType::cpu;
  std::int16_t index = -1;  // -1 for the CPU, the ordinal for CUDA

  static constexpr Device cpu() noexcept { return {}; }
  static constexpr Device cuda(int ordinal = 0) noexcept {
    return {DeviceType::cuda, static_cast<std::int16_t>(ordinal)};
  }
  constexpr bool is_cpu() const noexcept { return type == DeviceType::cpu; }
  constexpr bool is_cuda() const noexcept { return type == DeviceType::cuda; }
  friend constexpr bool operator==(Device, Device) noexcept = default;
  std::string str() const;  // "cpu", "cuda:0"
};

// Whether this build of forge has the CUDA backend, and how many devices it sees.
bool cuda_built() noexcept;
int cuda_device_count() noexcept;

}  // namespace forge
