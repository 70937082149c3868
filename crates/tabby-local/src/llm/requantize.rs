//! Lossless Q5_0 → Q8_0 conversion of GGUF weights.
//!
//! candle's CPU kernels have SIMD paths for Q4_0, Q8_0 and the K-quants, not for Q5_0, so a
//! Q5_0 matrix multiplies on the scalar path. A Q5_0 block is 32 five-bit values `q` with one
//! f16 scale `d` (value = d · (q − 16)); the Q8_0 block with the same `d` and `q − 16` as i8
//! holds exactly the same values, so the conversion changes speed and size, never the output.

use std::fs::File;
use std::io::{BufReader, BufWriter};
use std::path::Path;

use candle_core::Device;
use candle_core::quantized::{GgmlDType, QTensor, ggml_file, gguf_file};

const Q5_0_BLOCK_BYTES: usize = 22;
const Q8_0_BLOCK_BYTES: usize = 34;

/// What [`requantize_for_cpu`] changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequantizeReport {
    pub converted_tensors: usize,
    pub total_tensors: usize,
}

/// Writes `src` to `dst` with every Q5_0 tensor stored as Q8_0 (lossless, faster on CPU).
/// Metadata is copied unchanged. The model loader converts in memory anyway; doing it once on
/// disk only saves that work (a fraction of a second) at every start.
pub fn requantize_for_cpu(src: &Path, dst: &Path) -> anyhow::Result<RequantizeReport> {
    use anyhow::Context;
    let mut reader = BufReader::new(
        File::open(src).with_context(|| format!("cannot open {}", src.display()))?,
    );
    let content = gguf_file::Content::read(&mut reader)
        .with_context(|| format!("{} is not a GGUF file", src.display()))?;
    let mut names: Vec<&String> = content.tensor_infos.keys().collect();
    // Keep the file's own tensor order (by data offset) so the result reads the same way.
    names.sort_by_key(|n| content.tensor_infos[*n].offset);
    let mut tensors = Vec::with_capacity(names.len());
    let mut converted = 0;
    for name in &names {
        let tensor = content
            .tensor(&mut reader, name, &Device::Cpu)
            .with_context(|| format!("cannot read tensor {name} of {}", src.display()))?;
        let (tensor, changed) = to_cpu_friendly(tensor)?;
        converted += usize::from(changed);
        tensors.push((name.as_str(), tensor));
    }
    // The writer always aligns to 32 bytes; a different recorded alignment would be a lie.
    let metadata: Vec<(&str, &gguf_file::Value)> = content
        .metadata
        .iter()
        .filter(|(k, _)| k.as_str() != "general.alignment")
        .map(|(k, v)| (k.as_str(), v))
        .collect();
    let tensor_refs: Vec<(&str, &QTensor)> = tensors.iter().map(|(n, t)| (*n, t)).collect();
    let tmp = dst.with_extension("gguf.partial");
    {
        let mut out = BufWriter::new(
            File::create(&tmp).with_context(|| format!("cannot create {}", tmp.display()))?,
        );
        gguf_file::write(&mut out, &metadata, &tensor_refs)
            .with_context(|| format!("cannot write {}", tmp.display()))?;
        use std::io::Write;
        out.flush()?;
    }
    std::fs::rename(&tmp, dst)
        .with_context(|| format!("cannot move {} to {}", tmp.display(), dst.display()))?;
    Ok(RequantizeReport {
        converted_tensors: converted,
        total_tensors: names.len(),
    })
}

/// `tensor` itself, or its lossless Q8_0 twin if it is Q5_0; the flag says which.
pub(crate) fn to_cpu_friendly(tensor: QTensor) -> candle_core::Result<(QTensor, bool)> {
    if tensor.dtype() != GgmlDType::Q5_0 {
        return Ok((tensor, false));
    }
    let dims = tensor.shape().dims().to_vec();
    let q8 = q5_0_to_q8_0(&tensor.data()?)?;
    let converted = ggml_file::qtensor_from_ggml(GgmlDType::Q8_0, &q8, dims, &Device::Cpu)?;
    Ok((converted, true))
}

fn q5_0_to_q8_0(data: &[u8]) -> candle_core::Result<Vec<u8>> {
    if !data.len().is_multiple_of(Q5_0_BLOCK_BYTES) {
        candle_core::bail!("Q5_0 data of {} bytes is not whole blocks", data.len());
    }
    let mut out = Vec::with_capacity(data.len() / Q5_0_BLOCK_BYTES * Q8_0_BLOCK_BYTES);
    for block in data.chunks_exact(Q5_0_BLOCK_BYTES) {
        let (d, rest) = block.split_at(2);
        let (qh, qs) = rest.split_at(4);
        let qh = u32::from_le_bytes([qh[0], qh[1], qh[2], qh[3]]);
        out.extend_from_slice(d);
        let mut values = [0u8; 32];
        for j in 0..16 {
            let low = (qs[j] & 0x0F) | ((((qh >> j) & 1) as u8) << 4);
            let high = (qs[j] >> 4) | ((((qh >> (j + 16)) & 1) as u8) << 4);
            values[j] = (low as i8 - 16) as u8;
            values[j + 16] = (high as i8 - 16) as u8;
        }
        out.extend_from_slice(&values);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use candle_core::Tensor;

    use super::*;

    #[test]
    fn q5_0_to_q8_0_keeps_every_value() {
        let values: Vec<f32> = (0..4 * 32).map(|i| ((i * 37) % 61) as f32 / 7.0 - 4.0).collect();
        let src = Tensor::from_vec(values, (4, 32), &Device::Cpu).unwrap();
        let q5 = QTensor::quantize(&src, GgmlDType::Q5_0).unwrap();
        let before = q5.dequantize(&Device::Cpu).unwrap().to_vec2::<f32>().unwrap();
        let (q8, changed) = to_cpu_friendly(q5).unwrap();
        assert!(changed);
        assert_eq!(q8.dtype(), GgmlDType::Q8_0);
        let after = q8.dequantize(&Device::Cpu).unwrap().to_vec2::<f32>().unwrap();
        assert_eq!(before, after);
    }

    #[test]
    fn other_types_are_left_alone() {
        let src = Tensor::zeros((2, 32), candle_core::DType::F32, &Device::Cpu).unwrap();
        let q4 = QTensor::quantize(&src, GgmlDType::Q4_0).unwrap();
        let (t, changed) = to_cpu_friendly(q4).unwrap();
        assert!(!changed);
        assert_eq!(t.dtype(), GgmlDType::Q4_0);
    }
}
