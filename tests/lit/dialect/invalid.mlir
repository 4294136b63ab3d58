// RUN: flashjit-opt %s -split-input-file -verify-diagnostics

// Every verifier message of the attn dialect, word for word.

func.func @f(%q: tensor<2x8x64xbf16>, %k: tensor<2x8x64x64xbf16>, %v: tensor<2x8x64x64xbf16>, %s: f32) {
  // expected-error @+1 {{'attn.attention' op query must have rank 4 [batch, heads, seqlen, head_dim], got rank 3}}
  %o, %lse = attn.attention %q, %k, %v scale %s : tensor<2x8x64xbf16>, tensor<2x8x64x64xbf16>, tensor<2x8x64x64xbf16> -> tensor<2x8x64x64xbf16>, tensor<2x8x64xf32>
  return
}

// -----

func.func @f(%q: tensor<2x8x64x64xf32>, %k: tensor<2x8x64x64xf32>, %v: tensor<2x8x64x64xf32>, %s: f32) {
  // expected-error @+1 {{'attn.attention' op query element type must be f16 or bf16, got 'f32'}}
  %o, %lse = attn.attention %q, %k, %v scale %s : tensor<2x8x64x64xf32>, tensor<2x8x64x64xf32>, tensor<2x8x64x64xf32> -> tensor<2x8x64x64xf32>, tensor<2x8x64xf32>
  return
}

// -----

func.func @f(%q: tensor<2x8x64x64xbf16>, %k: tensor<2x8x64x64xf16>, %v: tensor<2x8x64x64xbf16>, %s: f32) {
  // expected-error @+1 {{'attn.attention' op key element type 'f16' differs from the query's 'bf16'}}
  %o, %lse = attn.attention %q, %k, %v scale %s : tensor<2x8x64x64xbf16>, tensor<2x8x64x64xf16>, tensor<2x8x64x64xbf16> -> tensor<2x8x64x64xbf16>, tensor<2x8x64xf32>
  return
}

// -----

func.func @f(%q: tensor<2x8x64x64xbf16>, %k: tensor<2x?x64x64xbf16>, %v: tensor<2x8x64x64xbf16>, %s: f32) {
  // expected-error @+1 {{'attn.attention' op key heads and head_dim must be static}}
  %o, %lse = attn.attention %q, %k, %v scale %s : tensor<2x8x64x64xbf16>, tensor<2x?x64x64xbf16>, tensor<2x8x64x64xbf16> -> tensor<2x8x64x64xbf16>, tensor<2x8x64xf32>
  return
}

// -----

func.func @f(%q: tensor<2x8x64x64xbf16>, %k: tensor<2x8x64x128xbf16>, %v: tensor<2x8x64x64xbf16>, %s: f32) {
  // expected-error @+1 {{'attn.attention' op head_dim of query (64), key (128) and value (64) must be equal}}
  %o, %lse = attn.attention %q, %k, %v scale %s : tensor<2x8x64x64xbf16>, tensor<2x8x64x128xbf16>, tensor<2x8x64x64xbf16> -> tensor<2x8x64x64xbf16>, tensor<2x8x64xf32>
  return
}

// -----

func.func @f(%q: tensor<2x8x64x64xbf16>, %k: tensor<3x8x64x64xbf16>, %v: tensor<?x8x64x64xbf16>, %s: f32) {
  // expected-error @+1 {{'attn.attention' op batch of query (2), key (3) and value (?) must agree}}
  %o, %lse = attn.attention %q, %k, %v scale %s : tensor<2x8x64x64xbf16>, tensor<3x8x64x64xbf16>, tensor<?x8x64x64xbf16> -> tensor<2x8x64x64xbf16>, tensor<2x8x64xf32>
  return
}

// -----

func.func @f(%q: tensor<2x8x64x64xbf16>, %k: tensor<2x8x64x64xbf16>, %v: tensor<2x4x64x64xbf16>, %s: f32) {
  // expected-error @+1 {{'attn.attention' op key has 8 heads but value has 4}}
  %o, %lse = attn.attention %q, %k, %v scale %s : tensor<2x8x64x64xbf16>, tensor<2x8x64x64xbf16>, tensor<2x4x64x64xbf16> -> tensor<2x8x64x64xbf16>, tensor<2x8x64xf32>
  return
}

// -----

func.func @f(%q: tensor<2x8x64x64xbf16>, %k: tensor<2x8x32x64xbf16>, %v: tensor<2x8x16x64xbf16>, %s: f32) {
  // expected-error @+1 {{'attn.attention' op key seqlen 32 differs from value seqlen 16}}
  %o, %lse = attn.attention %q, %k, %v scale %s : tensor<2x8x64x64xbf16>, tensor<2x8x32x64xbf16>, tensor<2x8x16x64xbf16> -> tensor<2x8x64x64xbf16>, tensor<2x8x64xf32>
  return
}

// -----

func.func @f(%q: tensor<2x8x64x64xbf16>, %k: tensor<2x3x64x64xbf16>, %v: tensor<2x3x64x64xbf16>, %s: f32) {
  // expected-error @+1 {{'attn.attention' op query heads (8) must be a multiple of key/value heads (3)}}
  %o, %lse = attn.attention %q, %k, %v scale %s : tensor<2x8x64x64xbf16>, tensor<2x3x64x64xbf16>, tensor<2x3x64x64xbf16> -> tensor<2x8x64x64xbf16>, tensor<2x8x64xf32>
  return
}

// -----

func.func @f(%q: tensor<2x8x64x64xbf16>, %k: tensor<2x8x64x64xbf16>, %v: tensor<2x8x64x64xbf16>, %s: f32) {
  // expected-error @+1 {{'attn.attention' op output type 'tensor<2x8x64x64xf16>' must match the query type 'tensor<2x8x64x64xbf16>'}}
  %o, %lse = attn.attention %q, %k, %v scale %s : tensor<2x8x64x64xbf16>, tensor<2x8x64x64xbf16>, tensor<2x8x64x64xbf16> -> tensor<2x8x64x64xf16>, tensor<2x8x64xf32>
  return
}

// -----

func.func @f(%q: tensor<2x8x64x64xbf16>, %k: tensor<2x8x64x64xbf16>, %v: tensor<2x8x64x64xbf16>, %s: f32) {
  // expected-error @+1 {{'attn.attention' op lse type 'tensor<2x8x64xf16>' must be f32 of shape [batch, heads, seqlen] of the query}}
  %o, %lse = attn.attention %q, %k, %v scale %s : tensor<2x8x64x64xbf16>, tensor<2x8x64x64xbf16>, tensor<2x8x64x64xbf16> -> tensor<2x8x64x64xbf16>, tensor<2x8x64xf16>
  return
}

// -----

func.func @f(%q: tensor<2x8x64x64xbf16>, %k: tensor<2x8x64x64xbf16>, %v: tensor<2x8x64x64xbf16>, %s: f32) {
  // expected-error @+1 {{'attn.attention' op score_mod region must take (f32, index, index, index, index) -> f32}}
  %o, %lse = attn.attention %q, %k, %v scale %s score_mod {
  ^bb0(%x: f32):
    attn.yield %x : f32
  } : tensor<2x8x64x64xbf16>, tensor<2x8x64x64xbf16>, tensor<2x8x64x64xbf16> -> tensor<2x8x64x64xbf16>, tensor<2x8x64xf32>
  return
}

// -----

func.func @f(%q: tensor<2x8x64x64xbf16>, %k: tensor<2x8x64x64xbf16>, %v: tensor<2x8x64x64xbf16>, %s: f32) {
  // expected-error @+1 {{'attn.attention' op score_mod region must end in attn.yield of one 'f32'}}
  %o, %lse = attn.attention %q, %k, %v scale %s score_mod {
  ^bb0(%x: f32, %b: index, %h: index, %i: index, %j: index):
    attn.yield %b : index
  } : tensor<2x8x64x64xbf16>, tensor<2x8x64x64xbf16>, tensor<2x8x64x64xbf16> -> tensor<2x8x64x64xbf16>, tensor<2x8x64xf32>
  return
}

// -----

func.func @f(%q: tensor<2x8x64x64xbf16>, %k: tensor<2x8x64x64xbf16>, %v: tensor<2x8x64x64xbf16>, %s: f32) {
  // expected-error @+1 {{'attn.attention' op mask_mod region must take (index, index, index, index) -> i1}}
  %o, %lse = attn.attention %q, %k, %v scale %s mask_mod {
  ^bb0(%b: index, %h: index, %i: index):
    %t = arith.constant true
    attn.yield %t : i1
  } : tensor<2x8x64x64xbf16>, tensor<2x8x64x64xbf16>, tensor<2x8x64x64xbf16> -> tensor<2x8x64x64xbf16>, tensor<2x8x64xf32>
  return
}

// -----

func.func @f(%q: tensor<2x8x64x64xbf16>, %k: tensor<2x8x64x64xbf16>, %v: tensor<2x8x64x64xbf16>, %s: f32) {
  // expected-error @+1 {{'attn.attention' op mask_mod region must end in attn.yield of one 'i1'}}
  %o, %lse = attn.attention %q, %k, %v scale %s mask_mod {
  ^bb0(%b: index, %h: index, %i: index, %j: index):
    %t = arith.constant 1.0 : f32
    attn.yield %t : f32
  } : tensor<2x8x64x64xbf16>, tensor<2x8x64x64xbf16>, tensor<2x8x64x64xbf16> -> tensor<2x8x64x64xbf16>, tensor<2x8x64xf32>
  return
}

// -----

func.func @f(%q: tensor<2x8x64x64xbf16>, %s: f32) {
  // expected-error @+1 {{tile_config needs a kernel family}}
  %o, %lse = attn.attention %q, %q, %q scale %s {config = #attn.tile_config<family = "", block_m = 64, block_n = 32, stages = 1, warps = 8>} : tensor<2x8x64x64xbf16>, tensor<2x8x64x64xbf16>, tensor<2x8x64x64xbf16> -> tensor<2x8x64x64xbf16>, tensor<2x8x64xf32>
  return
}

// -----

func.func @f(%q: tensor<2x8x64x64xbf16>, %s: f32) {
  // expected-error @+1 {{tile_config block_m must be a multiple of 16 in [16, 256], got 40}}
  %o, %lse = attn.attention %q, %q, %q scale %s {config = #attn.tile_config<family = "cuda_core", block_m = 40, block_n = 32, stages = 1, warps = 8>} : tensor<2x8x64x64xbf16>, tensor<2x8x64x64xbf16>, tensor<2x8x64x64xbf16> -> tensor<2x8x64x64xbf16>, tensor<2x8x64xf32>
  return
}

// -----

func.func @f(%q: tensor<2x8x64x64xbf16>, %s: f32) {
  // expected-error @+1 {{tile_config block_n must be a multiple of 16 in [16, 256], got 512}}
  %o, %lse = attn.attention %q, %q, %q scale %s {config = #attn.tile_config<family = "cuda_core", block_m = 64, block_n = 512, stages = 1, warps = 8>} : tensor<2x8x64x64xbf16>, tensor<2x8x64x64xbf16>, tensor<2x8x64x64xbf16> -> tensor<2x8x64x64xbf16>, tensor<2x8x64xf32>
  return
}

// -----

func.func @f(%q: tensor<2x8x64x64xbf16>, %s: f32) {
  // expected-error @+1 {{tile_config stages must be in [1, 8], got 0}}
  %o, %lse = attn.attention %q, %q, %q scale %s {config = #attn.tile_config<family = "cuda_core", block_m = 64, block_n = 32, stages = 0, warps = 8>} : tensor<2x8x64x64xbf16>, tensor<2x8x64x64xbf16>, tensor<2x8x64x64xbf16> -> tensor<2x8x64x64xbf16>, tensor<2x8x64xf32>
  return
}

// -----

func.func @f(%q: tensor<2x8x64x64xbf16>, %s: f32) {
  // expected-error @+1 {{tile_config warps must be in [1, 32], got 33}}
  %o, %lse = attn.attention %q, %q, %q scale %s {config = #attn.tile_config<family = "cuda_core", block_m = 64, block_n = 32, stages = 1, warps = 33>} : tensor<2x8x64x64xbf16>, tensor<2x8x64x64xbf16>, tensor<2x8x64x64xbf16> -> tensor<2x8x64x64xbf16>, tensor<2x8x64xf32>
  return
}

// -----

func.func @f() {
  // expected-error @+1 {{'attn.yield' op expects parent op 'attn.attention'}}
  attn.yield
}

// -----

func.func @f(%q: tensor<2x8x64x64xbf16>, %s: f32) {
  // expected-error @+1 {{tile_config block_n must be a multiple of 16 in [16, 256], got 40}}
  %o, %lse = attn.attention %q, %q, %q scale %s {config = #attn.tile_config<family = "cuda_core", block_m = 64, block_n = 40, stages = 1, warps = 8>} : tensor<2x8x64x64xbf16>, tensor<2x8x64x64xbf16>, tensor<2x8x64x64xbf16> -> tensor<2x8x64x64xbf16>, tensor<2x8x64xf32>
  return
}

// -----

func.func @unsupported_mod_op(%q: tensor<2x8x64x64xbf16>, %s: f32) {
  // expected-error @+1 {{'attn.attention' op score_mod region uses 'math.sin', which the kernels cannot place}}
  %o, %lse = attn.attention %q, %q, %q scale %s score_mod {
  ^bb0(%x: f32, %b: index, %h: index, %i: index, %j: index):
    %y = math.sin %x : f32
    attn.yield %y : f32
  } : tensor<2x8x64x64xbf16>, tensor<2x8x64x64xbf16>, tensor<2x8x64x64xbf16> -> tensor<2x8x64x64xbf16>, tensor<2x8x64xf32>
  return
}

// -----

// A region is cloned into the kernel alone: a value from outside it (here
// the function's scale, yielded as the score) is refused.
func.func @value_from_outside(%q: tensor<2x8x64x64xbf16>, %s: f32) {
  // expected-error @+1 {{'attn.attention' op score_mod region uses a value defined outside it (operand 'f32' of 'attn.yield'): a region reads its own arguments, the values it defines and the captured tensors}}
  %o, %lse = attn.attention %q, %q, %q scale %s score_mod {
  ^bb0(%x: f32, %b: index, %h: index, %i: index, %j: index):
    attn.yield %s : f32
  } : tensor<2x8x64x64xbf16>, tensor<2x8x64x64xbf16>, tensor<2x8x64x64xbf16> -> tensor<2x8x64x64xbf16>, tensor<2x8x64xf32>
  return
}

// -----

func.func @index_from_outside(%q: tensor<2x8x64x64xbf16>, %s: f32, %n: index) {
  // expected-error @+1 {{'attn.attention' op mask_mod region uses a value defined outside it (operand 'index' of 'arith.cmpi')}}
  %o, %lse = attn.attention %q, %q, %q scale %s mask_mod {
  ^bb0(%b: index, %h: index, %i: index, %j: index):
    %keep = arith.cmpi slt, %j, %n : index
    attn.yield %keep : i1
  } : tensor<2x8x64x64xbf16>, tensor<2x8x64x64xbf16>, tensor<2x8x64x64xbf16> -> tensor<2x8x64x64xbf16>, tensor<2x8x64xf32>
  return
}

// -----

func.func @negative_window(%q: tensor<2x8x64x64xbf16>, %s: f32) {
  // expected-error @+1 {{'attn.attention' op window_left is -3: a window extent is 0 or more keys}}
  %o, %lse = attn.attention %q, %q, %q scale %s {window_left = -3 : i64} : tensor<2x8x64x64xbf16>, tensor<2x8x64x64xbf16>, tensor<2x8x64x64xbf16> -> tensor<2x8x64x64xbf16>, tensor<2x8x64xf32>
  return
}

// -----

func.func @capture_signature(%q: tensor<2x8x64x64xbf16>, %s: f32, %c: tensor<8xf32>) {
  // expected-error @+1 {{'attn.attention' op score_mod region must take (f32, index, index, index, index, tensor<8xf32>) -> f32}}
  %o, %lse = attn.attention %q, %q, %q scale %s captures(%c : tensor<8xf32>) score_mod {
  ^bb0(%x: f32, %b: index, %h: index, %i: index, %j: index):
    attn.yield %x : f32
  } : tensor<2x8x64x64xbf16>, tensor<2x8x64x64xbf16>, tensor<2x8x64x64xbf16> -> tensor<2x8x64x64xbf16>, tensor<2x8x64xf32>
  return
}

// -----

func.func @sparse_block(%q: tensor<2x8x64x64xbf16>, %s: f32) {
  // expected-error @+1 {{'attn.attention' op sparse_block is array<i64: 128, 100>: expected [block_m, block_n], each a multiple of 16 from 16 to 4096}}
  %o, %lse = attn.attention %q, %q, %q scale %s {sparse_block = array<i64: 128, 100>} : tensor<2x8x64x64xbf16>, tensor<2x8x64x64xbf16>, tensor<2x8x64x64xbf16> -> tensor<2x8x64x64xbf16>, tensor<2x8x64xf32>
  return
}

// -----

func.func @page_size_power(%q: tensor<1x8x?x64xbf16>, %s: f32) {
  // expected-error @+1 {{'attn.attention' op page_size is 48: expected a power of two from 16 to 256}}
  %o, %lse = attn.attention %q, %q, %q scale %s {varlen, page_size = 48} : tensor<1x8x?x64xbf16>, tensor<1x8x?x64xbf16>, tensor<1x8x?x64xbf16> -> tensor<1x8x?x64xbf16>, tensor<1x8x?xf32>
  return
}

// -----

func.func @page_size_dense(%q: tensor<2x8x64x64xbf16>, %s: f32) {
  // expected-error @+1 {{'attn.attention' op page_size is for varlen attention (paged K/V of packed sequences): add varlen}}
  %o, %lse = attn.attention %q, %q, %q scale %s {page_size = 16} : tensor<2x8x64x64xbf16>, tensor<2x8x64x64xbf16>, tensor<2x8x64x64xbf16> -> tensor<2x8x64x64xbf16>, tensor<2x8x64xf32>
  return
}

// -----

func.func @score_grad_alone(%q: tensor<2x8x64x64xbf16>, %s: f32) {
  // expected-error @+1 {{'attn.attention' op has a score_grad region but no score_mod: score_grad is the derivative of a score_mod}}
  %o, %lse = attn.attention %q, %q, %q scale %s score_grad {
  ^bb0(%score: f32, %b: index, %h: index, %qi: index, %kv: index):
    %one = arith.constant 1.0 : f32
    attn.yield %score, %one : f32, f32
  } : tensor<2x8x64x64xbf16>, tensor<2x8x64x64xbf16>, tensor<2x8x64x64xbf16> -> tensor<2x8x64x64xbf16>, tensor<2x8x64xf32>
  return
}

// -----

func.func @score_grad_one_value(%q: tensor<2x8x64x64xbf16>, %s: f32) {
  // expected-error @+1 {{'attn.attention' op score_grad region must end in attn.yield of 2 values ('f32', 'f32')}}
  %o, %lse = attn.attention %q, %q, %q scale %s score_mod {
  ^bb0(%score: f32, %b: index, %h: index, %qi: index, %kv: index):
    attn.yield %score : f32
  } score_grad {
  ^bb0(%score: f32, %b: index, %h: index, %qi: index, %kv: index):
    attn.yield %score : f32
  } : tensor<2x8x64x64xbf16>, tensor<2x8x64x64xbf16>, tensor<2x8x64x64xbf16> -> tensor<2x8x64x64xbf16>, tensor<2x8x64xf32>
  return
}
