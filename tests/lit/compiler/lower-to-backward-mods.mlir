// RUN: flashjit-opt %s -attn-differentiate-score-mod -attn-lower-to-kernel=kernel=backward | FileCheck %s
// RUN: flashjit-opt %s --flashjit-pipeline="chip=sm_90a kernel=backward" | FileCheck %s --check-prefix=PTX
// RUN: not flashjit-opt %s -attn-lower-to-kernel=kernel=backward 2>&1 | FileCheck %s --check-prefix=NOGRAD

// Soft-capping with a document mask (document ids captured, [B, S] i32)
// in the sm_90a backward: the main kernel takes the captured tensor's
// pointer and two strides after the TMA maps of Q and dO, recomputes the
// soft-capped scores, masks every tile by the documents, and scales dS by
// the soft-cap's derivative 1 - tanh^2. The ids are read while the
// products run: each warp stages its step's query ids in shared memory
// (lane l reads queries l and l + 32), and each thread reads its key rows'.
// CHECK-LABEL: gpu.func @softcap_documents_bwd(
// CHECK-SAME: %{{.+}}: !llvm.ptr, %{{.+}}: !llvm.ptr, %{{.+}}: !llvm.ptr<1>, %{{.+}}: i64, %{{.+}}: i64) kernel
// CHECK: wgmma.mma_async.sync.aligned
// CHECK: nvvm.bar.warp.sync
// CHECK: %[[QID:.+]] = llvm.load {{.+}} invariant {{.+}} : !llvm.ptr<1> -> i32
// CHECK: llvm.store %[[QID]], %{{.+}} : i32, !llvm.ptr<3>
// CHECK: nvvm.bar.warp.sync
// CHECK: %[[STAGED:.+]] = llvm.load {{.+}} : !llvm.ptr<3> -> i32
// CHECK: llvm.load {{.+}} invariant {{.+}} : !llvm.ptr<1> -> i32
// CHECK: "tanh.approx.f32 $0, $1;"
// CHECK: arith.cmpi eq, %[[STAGED]], %{{.+}} : i32
// CHECK: gpu.func @softcap_documents_bwd_dq(
// PTX: .entry softcap_documents_bwd(
// PTX: ld.global.nc.b32
// PTX: tanh.approx.f32
// PTX: wgmma.mma_async
// NOGRAD: error: 'attn.attention' op has a score_mod but no score_grad region: the backward kernels need its derivative (run attn-differentiate-score-mod first)
func.func @softcap_documents(%q: tensor<?x4x?x64xbf16>,
                             %k: tensor<?x2x?x64xbf16>,
                             %v: tensor<?x2x?x64xbf16>, %s: f32,
                             %docs: tensor<?x?xi32>)
    -> (tensor<?x4x?x64xbf16>, tensor<?x4x?xf32>) {
  %o, %lse = attn.attention %q, %k, %v scale %s causal
      captures(%docs : tensor<?x?xi32>)
      {config = #attn.tile_config<family = "wgmma_bwd", block_m = 64, block_n = 128, stages = 2, warps = 8>}
      score_mod {
  ^bb0(%score: f32, %b: index, %h: index, %qi: index, %kv: index,
       %d: tensor<?x?xi32>):
    %cap = arith.constant 30.0 : f32
    %x = arith.divf %score, %cap : f32
    %t = math.tanh %x : f32
    %r = arith.mulf %cap, %t : f32
    attn.yield %r : f32
  } mask_mod {
  ^bb0(%b: index, %h: index, %qi: index, %kv: index, %d: tensor<?x?xi32>):
    %dq = tensor.extract %d[%b, %qi] : tensor<?x?xi32>
    %dk = tensor.extract %d[%b, %kv] : tensor<?x?xi32>
    %same = arith.cmpi eq, %dq, %dk : i32
    attn.yield %same : i1
  } : tensor<?x4x?x64xbf16>, tensor<?x2x?x64xbf16>, tensor<?x2x?x64xbf16>
      -> tensor<?x4x?x64xbf16>, tensor<?x4x?xf32>
  return %o, %lse : tensor<?x4x?x64xbf16>, tensor<?x4x?xf32>
}
