// Typed errors raised at the library's boundary. Messages start with where the
// problem happened (node name, op type, input index) and show what was involved.
#pragma once
#include <stdexcept>
#include <string>

namespace onnxtrain {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The model file or bytes are missing, truncated or malformed.
class ModelError : public Error {
  using Error::Error;
};
// An op (or an attribute value of an op) that onnxtrain does not implement.
class UnsupportedError : public Error {
  using Error::Error;
};
// Shapes that do not fit together, at inference or at run time.
class ShapeError : public Error {
  using Error::Error;
};
// A wrong input name, dtype or rank given to a session.
class InputError : public Error {
  using Error::Error;
};
// An allocation past the allocator's limit.
class OutOfMemoryError : public Error {
  using Error::Error;
};
// A checkpoint that is truncated, corrupt or of an unknown format version.
class CheckpointError : public Error {
  using Error::Error;
};
// A memory optimizer config that cannot be understood (the message quotes the entry).
class ConfigError : public Error {
  using Error::Error;
};
// A file that cannot be read or written.
class IoError : public Error {
  using Error::Error;
};

}  // namespace onnxtrain
