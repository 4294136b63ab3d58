// placeholder until the runtime API lands (replaced before commit)
#include "Commands.h"
namespace flashjit::tools {
int runRun() { return reportError("Run", llvm::createStringError("not built yet")); }
}
