// RUN: flashjit-opt %s -split-input-file -attn-lower-to-kernel=kernel=block-mask -verify-diagnostics | FileCheck %s
// RUN: flashjit-opt %s -split-input-file --flashjit-pipeline="chip=sm_90a kernel=block-mask" -verify-diagnostics | FileCheck %s --check-prefix=PTX

// A block-sparse description with a document mask_mod becomes the kernel
// that builds its block mask: seqlens, the captured document ids, then the
// four lists (counts rank 3, indices rank 4), 128 threads.
// CHECK-LABEL: gpu.func @documents_block_mask(%{{.+}}: i32, %{{.+}}: i32, %{{.+}}: !llvm.ptr<1>, %{{.+}}: i64, %{{.+}}: i64, %{{.+}}: !llvm.ptr<1>, %{{.+}}: i64, %{{.+}}: i64, %{{.+}}: i64, %{{.+}}: !llvm.ptr<1>, %{{.+}}: i64, %{{.+}}: i64, %{{.+}}: i64, %{{.+}}: i64, %{{.+}}: !llvm.ptr<1>, %{{.+}}: i64, %{{.+}}: i64, %{{.+}}: i64, %{{.+}}: !llvm.ptr<1>, %{{.+}}: i64, %{{.+}}: i64, %{{.+}}: i64, %{{.+}}: i64) kernel attributes {known_block_size = array<i32: 128, 1, 1>}
// The full lists are optional: a null pointer.
// CHECK: llvm.icmp "ne"
// One loop over the key blocks counting partial and full ones ...
// CHECK: scf.for {{.+}} iter_args(%{{.+}} = %{{.+}}, %{{.+}} = %{{.+}}) -> (i64, i64)
// ... each thread scanning its pairs until it has seen both answers ...
// CHECK: scf.while
// The mask_mod reads the document ids.
// CHECK: llvm.load {{.+}} -> i32
// CHECK: llvm.load {{.+}} -> i32
// CHECK: arith.cmpi eq
// ... and one barrier reduction per answer for the whole block.
// CHECK: nvvm.barrier #nvvm.reduction<or>
// CHECK: nvvm.barrier #nvvm.reduction<and>
// CHECK: scf.if
// CHECK: llvm.store
// CHECK-NOT: attn.attention
// PTX: bar.red.or.pred
// PTX: bar.red.and.pred
func.func @documents(%q: tensor<?x4x?x64xbf16>, %k: tensor<?x4x?x64xbf16>,
                     %v: tensor<?x4x?x64xbf16>, %scale: f32,
                     %docs: tensor<?x?xi32>)
    -> (tensor<?x4x?x64xbf16>, tensor<?x4x?xf32>) {
  %o, %lse = attn.attention %q, %k, %v scale %scale causal
      captures(%docs : tensor<?x?xi32>)
      {sparse_block = array<i64: 128, 64>} mask_mod {
  ^bb0(%b: index, %h: index, %qi: index, %ki: index, %d: tensor<?x?xi32>):
    %dq = tensor.extract %d[%b, %qi] : tensor<?x?xi32>
    %dk = tensor.extract %d[%b, %ki] : tensor<?x?xi32>
    %same = arith.cmpi eq, %dq, %dk : i32
    attn.yield %same : i1
  } : tensor<?x4x?x64xbf16>, tensor<?x4x?x64xbf16>, tensor<?x4x?x64xbf16>
      -> tensor<?x4x?x64xbf16>, tensor<?x4x?xf32>
  return %o, %lse : tensor<?x4x?x64xbf16>, tensor<?x4x?xf32>
}

// -----

// Only a block-sparse attention has a block mask to build.
func.func @dense(%q: tensor<?x4x?x64xbf16>, %k: tensor<?x4x?x64xbf16>,
                 %v: tensor<?x4x?x64xbf16>, %scale: f32)
    -> (tensor<?x4x?x64xbf16>, tensor<?x4x?xf32>) {
  // expected-error @+1 {{a block mask is built for a block-sparse spec}}
  %o, %lse = attn.attention %q, %k, %v scale %scale causal
      : tensor<?x4x?x64xbf16>, tensor<?x4x?x64xbf16>, tensor<?x4x?x64xbf16>
      -> tensor<?x4x?x64xbf16>, tensor<?x4x?xf32>
  return %o, %lse : tensor<?x4x?x64xbf16>, tensor<?x4x?xf32>
}
