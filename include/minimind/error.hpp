#pragma once
// The one exception type of the library. Every message names what was wrong and where (file,
// tensor, field, byte offset), because the user usually cannot see inside the file we rejected.
#include <stdexcept>
#include <string>

namespace minimind {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

}  // namespace minimind
