// The corpus kernels this program runs: name, source file under tests/kernels/, entry
// (`None`: the object's only global function), return type and arguments, spelled exactly as
// in the corpus (tests/src/lib.rs, `elfjit run --arg` syntax). tests/tests/nostd_loongarch.rs
// checks that they stay identical, then checks every result with the corpus's own checks.
//
// Left out: many_args (20 arguments, more than the 8 integer + 8 floating-point registers
// this program's generic call passes), f16_convert and bf16_convert (clang 19 has no
// `_Float16`/`__bf16` for loongarch64).
//
// build.rs `include!`s this file too, to know which kernels to compile.

pub struct Case {
    pub name: &'static str,
    pub file: &'static str,
    pub entry: Option<&'static str>,
    pub ret: &'static str,
    pub args: &'static [&'static str],
}

pub const CASES: &[Case] = &[
    Case {
        name: "elementwise_sqrt_fma",
        file: "elementwise_sqrt_fma.c",
        entry: None,
        ret: "void",
        args: &["f32[16]=iota", "f32[16]=fill:0.25", "f32[16]", "i32:13"],
    },
    Case {
        name: "softmax_expf",
        file: "softmax_expf.c",
        entry: None,
        ret: "void",
        args: &[
            "f32[10]=0.5,-1,2,3.25,0,-4,1.5,2,-0.75,6",
            "f32[10]",
            "i32:10",
        ],
    },
    Case {
        name: "reduce_sumsq",
        file: "reduce_sumsq.c",
        entry: None,
        ret: "f32",
        args: &[
            "f32[12]=0.5,-1.25,2,3.75,-0.125,10,7.5,-3.3,0.01,4,-9.5,1.1",
            "i32:12",
        ],
    },
    Case {
        name: "matmul_vec4",
        file: "matmul_vec4.c",
        entry: Some("matmul_vec4"),
        ret: "void",
        args: &[
            "f32[15]=1,0.5,-2,3,0.25,-1,2,0.75,-0.5,4,0,1.5,-3,2.5,1",
            "f32[40]=iota",
            "f32[24]",
            "i32:3",
            "i32:5",
            "i32:8",
        ],
    },
    Case {
        name: "crc32_lut",
        file: "crc32_lut.c",
        entry: None,
        ret: "u32",
        args: &["u8[9]=49,50,51,52,53,54,55,56,57", "i32:9"],
    },
    Case {
        name: "string_table",
        file: "string_table.c",
        entry: None,
        ret: "i32",
        args: &["i32:4", "u8[64]", "i32:40", "i32:107", "i32[2]"],
    },
    Case {
        name: "data_bss_state",
        file: "data_bss_state.c",
        entry: None,
        ret: "i32",
        args: &["f32[8]=0.5,1.5,-2,3,4.25,5,-6.5,7", "f32[8]", "i32:8"],
    },
    Case {
        name: "static_helpers",
        file: "static_helpers.c",
        entry: None,
        ret: "i32",
        args: &["f32[6]=-2,-0.5,0,0.5,1.5,3", "f32[6]", "i32:6", "i32:15"],
    },
    Case {
        name: "switch_jumptable",
        file: "switch_jumptable.c",
        entry: None,
        ret: "void",
        args: &[
            "i32[12]=0,1,2,3,4,5,6,7,8,9,10,-3",
            "i32[12]=5,-7,100,3,9,-50,-13,-9,12,42,1,2",
            "i32[12]",
            "i32:12",
        ],
    },
    Case {
        name: "struct_memcpy",
        file: "struct_memcpy.c",
        entry: None,
        ret: "i32",
        args: &["f32[20]=iota", "f32[24]", "i32:20", "f32:1.5"],
    },
    Case {
        name: "ret_i64",
        file: "ret_i64.c",
        entry: None,
        ret: "i64",
        args: &[
            "i64[5]=1,-2,3000000000,-4000000000000,5",
            "i32:5",
            "i64:12345",
        ],
    },
    Case {
        name: "ret_f64",
        file: "ret_f64.c",
        entry: None,
        ret: "f64",
        args: &[
            "f64[12]=1,1e-16,1e-16,1e-16,1e-16,1e-16,1e-16,1e-16,1e-16,1e-16,1e-16,3",
            "i32:12",
            "f64:2",
        ],
    },
    Case {
        name: "int128_div",
        file: "int128_div.c",
        entry: None,
        ret: "void",
        args: &[
            "u64[8]=0,1,18446744073709551615,18446744073709551615,12345,9223372036854775808,1000,0",
            "u64[8]=3,0,4886718345,0,0,7,18446744073709551609,18446744073709551615",
            "u64[32]",
            "i32:4",
        ],
    },
    Case {
        name: "layernorm",
        file: "layernorm.c",
        entry: None,
        ret: "f32",
        args: &[
            "f32[8]=1,2,3,4,5,6,7,9",
            "f32[8]=fill:1.5",
            "f32[8]=fill:-0.25",
            "f32[8]",
            "i32:8",
            "f32:0.00001",
        ],
    },
    Case {
        name: "quantize_i8",
        file: "quantize_i8.c",
        entry: None,
        ret: "i32",
        args: &[
            "f32[10]=0.05,-0.05,1.3,-1.3,0.25,0.35,100,-100,12.7,-12.85",
            "i8[10]",
            "f32[10]",
            "i32:10",
            "f32:0.1",
        ],
    },
    Case {
        name: "dispatch_table",
        file: "dispatch_table.c",
        entry: None,
        ret: "i32",
        args: &[
            "i32[8]=0,1,2,3,4,5,-1,7",
            "f32[8]=-2,3,1.5,-4,0.5,-0.25,2.5,8",
            "f32[8]",
            "i32:8",
        ],
    },
    Case {
        name: "global_data_got",
        file: "global_data_got.c",
        entry: Some("global_data_got"),
        ret: "i32",
        args: &["f32[6]=1,2,3,4,5,6", "f32[6]", "i32:6"],
    },
    Case {
        name: "ir_saxpy",
        file: "ir_saxpy.ll",
        entry: None,
        ret: "void",
        args: &["f32:2.5", "f32[19]=iota", "f32[19]=fill:1", "i64:19"],
    },
    Case {
        name: "ir_vec4_bias_relu",
        file: "ir_vec4_bias_relu.ll",
        entry: None,
        ret: "void",
        args: &[
            "f32[12]=-3,-2,-1,0,1,2,3,4,5,-6,7,-8",
            "f32[12]=0.5,0.5,0.5,0.5,-1,-1,-1,-1,2,2,2,2",
            "f32[12]",
            "f32:0.75",
            "i64:12",
        ],
    },
    Case {
        name: "ir_sigmoid_expf",
        file: "ir_sigmoid_expf.ll",
        entry: None,
        ret: "void",
        args: &["f32[9]=-4,-2,-1,-0.5,0,0.5,1,2,4", "f32[9]", "i64:9"],
    },
    Case {
        name: "ir_dot_reassoc",
        file: "ir_dot_reassoc.ll",
        entry: None,
        ret: "f32",
        args: &["f32[37]=iota", "f32[37]=fill:0.1", "i64:37"],
    },
    Case {
        name: "ir_globals_i64",
        file: "ir_globals_i64.ll",
        entry: Some("ir_globals_i64"),
        ret: "i64",
        args: &[
            "i64[20]=0,1,2,3,4,5,6,7,15,23,9,10,11,12,13,14,6,7,0,-1",
            "i64[20]",
            "i64:20",
        ],
    },
];
