// RUN: flashjit-opt %s --split-input-file --verify-diagnostics --pass-pipeline="builtin.module(llvm.func(attn-mark-grid-constant-params))" | FileCheck %s

// The arguments named in flashjit.tensor_map_args become 128-byte, 64-byte
// aligned by-value grid constants; the others and the list itself go.
// CHECK-LABEL: llvm.func @kernel(
// CHECK-SAME: %{{.*}}: !llvm.ptr<1>,
// CHECK-SAME: %{{.*}}: !llvm.ptr {llvm.align = 64 : i64, llvm.byval = !llvm.array<128 x i8>, nvvm.grid_constant},
// CHECK-SAME: %{{.*}}: !llvm.ptr {llvm.align = 64 : i64, llvm.byval = !llvm.array<128 x i8>, nvvm.grid_constant})
// CHECK-NOT: flashjit.tensor_map_args
llvm.func @kernel(%o: !llvm.ptr<1>, %qMap: !llvm.ptr, %kMap: !llvm.ptr)
    attributes {nvvm.kernel, flashjit.tensor_map_args = array<i32: 1, 2>} {
  llvm.return
}

// -----

// Functions without the list are left alone.
// CHECK-LABEL: llvm.func @plain(
// CHECK-SAME: %{{.*}}: !llvm.ptr)
// CHECK-NOT: byval
llvm.func @plain(%p: !llvm.ptr) attributes {nvvm.kernel} {
  llvm.return
}

// -----

// expected-error @+1 {{flashjit.tensor_map_args names argument 3, which is not a pointer argument}}
llvm.func @out_of_range(%p: !llvm.ptr) attributes {nvvm.kernel, flashjit.tensor_map_args = array<i32: 3>} {
  llvm.return
}

// -----

// expected-error @+1 {{flashjit.tensor_map_args names argument 0, which is not a pointer argument}}
llvm.func @not_a_pointer(%x: i64) attributes {nvvm.kernel, flashjit.tensor_map_args = array<i32: 0>} {
  llvm.return
}
