// placeholder until the runtime API lands (replaced before commit)
#include "Commands.h"
namespace flashjit::tools {
int runCache() { return reportError("Cache", llvm::createStringError("not built yet")); }
}
