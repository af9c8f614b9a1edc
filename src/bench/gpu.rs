//! Published peak memory bandwidth and dense 16-bit tensor FLOP/s of common accelerators, one
//! GPU each (`--gpu`): the denominators of MBU and MFU. Sources in docs/hardware.md.

/// One accelerator's published peaks.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Gpu {
    pub name: &'static str,
    /// Bytes a second.
    pub bandwidth: f64,
    /// Dense FP16/BF16 tensor FLOP/s (without structured sparsity).
    pub flops: f64,
}

const fn g(name: &'static str, tb_s: f64, tflops: f64) -> Gpu {
    Gpu {
        name,
        bandwidth: tb_s * 1e12,
        flops: tflops * 1e12,
    }
}

/// The table (docs/hardware.md gives each row's source).
pub const GPUS: &[Gpu] = &[
    g("v100", 0.9, 125.0),
    g("a100-40g", 1.555, 312.0),
    g("a100-80g", 2.039, 312.0),
    g("h100-sxm", 3.35, 989.0),
    g("h100-pcie", 2.0, 756.0),
    g("h200", 4.8, 989.0),
    g("l40s", 0.864, 362.0),
    g("l4", 0.3, 121.0),
    g("mi300x", 5.3, 1307.0),
];

/// The row of this name.
pub fn lookup(name: &str) -> Result<Gpu, String> {
    let n = name.to_ascii_lowercase();
    GPUS.iter().find(|g| g.name == n).copied().ok_or_else(|| {
        let names: Vec<&str> = GPUS.iter().map(|g| g.name).collect();
        format!(
            "--gpu {name:?}: not in the table ({}); give --peak-bandwidth and --peak-flops instead",
            names.join(", ")
        )
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_table_answers_by_name() {
        let v = super::lookup("V100").unwrap();
        assert_eq!((v.bandwidth, v.flops), (0.9e12, 125e12));
        assert!(super::lookup("h100-sxm").is_ok() && super::lookup("a100-80g").is_ok());
        assert!(super::lookup("tpu").unwrap_err().contains("h200"));
    }
}
