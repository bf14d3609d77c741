#include "tools/commands.h"

namespace onnxtrain::cli {

static int g_exit_code = 0;
int exit_code() { return g_exit_code; }
void set_exit_code(int code) { g_exit_code = code; }

}  // namespace onnxtrain::cli
