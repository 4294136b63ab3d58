// RUN: not flashjit-opt %s -attn-attach-config="chip=sm_70" 2>&1 | FileCheck %s
// CHECK: error: unknown arch 'sm_70': expected one of sm_80, sm_86, sm_89, sm_90, sm_90a
module {}
