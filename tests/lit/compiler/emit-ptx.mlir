// attn-emit-ptx: a gpu.module with one #nvvm.target becomes a gpu.binary of
// the same name holding its PTX; without one it is an error, not a crash.
// RUN: flashjit-opt %s --split-input-file --attn-emit-ptx --verify-diagnostics | FileCheck %s

// CHECK: gpu.binary @kernels [#gpu.object<#nvvm.target<chip = "sm_90a", features = "+ptx80">, assembly = "
// CHECK-SAME: .target sm_90a
// CHECK-SAME: .entry scale(
// CHECK-SAME: mul.rn.f32
// CHECK-NOT: gpu.module
module attributes {gpu.container_module} {
  gpu.module @kernels [#nvvm.target<chip = "sm_90a", features = "+ptx80">] {
    llvm.func @scale(%p: !llvm.ptr<1>, %s: f32) attributes {nvvm.kernel} {
      %x = llvm.load %p : !llvm.ptr<1> -> f32
      %y = llvm.fmul %x, %s : f32
      llvm.store %y, %p : f32, !llvm.ptr<1>
      llvm.return
    }
  }
}

// -----

module attributes {gpu.container_module} {
  // expected-error @below {{expected one #nvvm.target on the module}}
  gpu.module @untargeted {
    llvm.func @k() attributes {nvvm.kernel} {
      llvm.return
    }
  }
}
