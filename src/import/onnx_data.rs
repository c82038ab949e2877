//! The data of ONNX tensors (initializers and `Constant` values) as little-endian bytes, and
//! the tensor-file dtype of each ONNX element type.
//!
//! ONNX stores a tensor's elements either in `raw_data` (little-endian bytes, taken as is)
//! or in the typed field its element type uses: `float_data` (FLOAT, COMPLEX64),
//! `double_data` (DOUBLE, COMPLEX128), `int64_data` (INT64), `uint64_data` (UINT32,
//! UINT64), `int32_data` (INT32; INT16, UINT16, FLOAT16 and BFLOAT16 as 16-bit patterns;
//! INT8, UINT8, BOOL and the FLOAT8 types as bytes). Typed elements are converted to the
//! element type's little-endian bytes. External data (`data_location: EXTERNAL`) and
//! strings have no bytes here: they are errors the importer reports with the tensor's name.
//!
//! Cost: O(bytes); `raw_data` is borrowed, not copied.

use super::onnx_proto::{AttributeProto, TensorProto};
use crate::data_file::Dtype;
use std::borrow::Cow;

/// What to do about external data, quoted in errors.
pub const EXTERNAL_DATA_HINT: &str = "load it into the model first: python3 -c \"import onnx, sys; m = onnx.load(sys.argv[1], load_external_data=True); onnx.save(m, sys.argv[2], save_as_external_data=False)\" MODEL.onnx MODEL.inline.onnx (models over 2 GB cannot be inlined)";

/// Bytes per element of ONNX element type `elem` (0 for the 4-bit types, which pack two
/// elements per byte); `None` for strings and unknown types.
fn element_size(elem: i32) -> Option<u64> {
    Some(match elem {
        2 | 3 | 9 | 17..=20 => 1,
        4 | 5 | 10 | 16 => 2,
        1 | 6 | 12 => 4,
        7 | 11 | 13 | 14 => 8,
        15 => 16,
        21 | 22 => 0,
        _ => return None,
    })
}

/// The bytes `numel` elements of `elem` take (4-bit types: two per byte).
pub fn byte_count(elem: i32, numel: u64) -> Option<u64> {
    match element_size(elem)? {
        0 => Some(numel.div_ceil(2)),
        s => numel.checked_mul(s),
    }
}

/// The little-endian bytes of `t`'s `numel` elements of type `elem`, or what is wrong.
pub fn tensor_bytes(t: &TensorProto, elem: i32, numel: u64) -> Result<Cow<'_, [u8]>, String> {
    if t.data_location == Some(1) || !t.external_data.is_empty() {
        let location = t
            .external_data
            .iter()
            .find(|(k, _)| k == "location")
            .map_or("an unnamed file", |(_, v)| v.as_str());
        return Err(format!(
            "its data is stored outside the model (external data in {location:?}), which memplan does not read; {EXTERNAL_DATA_HINT}"
        ));
    }
    if elem == 8 || t.has_string_data {
        return Err("a STRING tensor has no fixed-size data".into());
    }
    let expected = byte_count(elem, numel)
        .ok_or_else(|| format!("element type {elem} has no fixed size in bytes"))?;
    let bytes: Cow<'_, [u8]> = match &t.raw_data {
        Some(raw) => Cow::Borrowed(raw.as_slice()),
        None => Cow::Owned(typed_bytes(t, elem)?),
    };
    if bytes.len() as u64 != expected {
        let field = if t.raw_data.is_some() {
            "raw_data"
        } else {
            "its typed data field"
        };
        return Err(format!(
            "{field} holds {} bytes, its type and shape need {expected}",
            bytes.len()
        ));
    }
    Ok(bytes)
}

/// The typed field's elements as little-endian bytes of `elem`.
fn typed_bytes(t: &TensorProto, elem: i32) -> Result<Vec<u8>, String> {
    Ok(match elem {
        1 | 14 => t.float_data.iter().flat_map(|v| v.to_le_bytes()).collect(),
        11 | 15 => t.double_data.iter().flat_map(|v| v.to_le_bytes()).collect(),
        7 => t.int64_data.iter().flat_map(|v| v.to_le_bytes()).collect(),
        13 => t.uint64_data.iter().flat_map(|v| v.to_le_bytes()).collect(),
        12 => t
            .uint64_data
            .iter()
            .flat_map(|&v| (v as u32).to_le_bytes())
            .collect(),
        6 => t
            .int32_data
            .iter()
            .flat_map(|&v| (v as i32).to_le_bytes())
            .collect(),
        4 | 5 | 10 | 16 => t
            .int32_data
            .iter()
            .flat_map(|&v| (v as u16).to_le_bytes())
            .collect(),
        2 | 3 | 9 | 17..=20 => t.int32_data.iter().map(|&v| v as u8).collect(),
        _ => {
            return Err(format!(
                "element type {elem} is only read from raw_data, which this tensor lacks"
            ))
        }
    })
}

/// A constant's ONNX element type, shape and little-endian bytes.
pub type ConstantValue = (i32, Vec<u64>, Vec<u8>);

/// A `Constant` node's value attribute; `None` when the attribute holds no dense numeric
/// value (sparse tensors, strings).
pub fn constant_value(a: &AttributeProto) -> Option<Result<ConstantValue, String>> {
    let name = a.name.as_deref().unwrap_or("");
    Some(Ok(match name {
        "value" => {
            let t = a.t.as_ref()?;
            let elem = t.data_type.unwrap_or(0);
            let shape: Option<Vec<u64>> = t.dims.iter().map(|&d| u64::try_from(d).ok()).collect();
            let Some(shape) = shape else {
                return Some(Err("the value has a negative dimension".into()));
            };
            let numel = shape.iter().product();
            return Some(tensor_bytes(t, elem, numel).map(|b| (elem, shape, b.into_owned())));
        }
        "value_float" => (1, vec![], a.f?.to_le_bytes().to_vec()),
        "value_int" => (7, vec![], a.i?.to_le_bytes().to_vec()),
        "value_floats" => (
            1,
            vec![a.floats.len() as u64],
            a.floats.iter().flat_map(|v| v.to_le_bytes()).collect(),
        ),
        "value_ints" => (
            7,
            vec![a.ints.len() as u64],
            a.ints.iter().flat_map(|v| v.to_le_bytes()).collect(),
        ),
        _ => return None,
    }))
}

/// The tensor-file dtype of ONNX element type `elem`: the same name (FLOAT → F32, INT64 →
/// I64, BOOL → BOOL, FLOAT16 → F16, BFLOAT16 → BF16, FLOAT8E4M3FN → F8_E4M3, FLOAT8E5M2 →
/// F8_E5M2, ...); complex, 4-bit and the FNUZ 8-bit types have no counterpart.
pub fn dtype_of(elem: i32) -> Result<Dtype, String> {
    Ok(match elem {
        1 => Dtype::F32,
        2 => Dtype::U8,
        3 => Dtype::I8,
        4 => Dtype::U16,
        5 => Dtype::I16,
        6 => Dtype::I32,
        7 => Dtype::I64,
        9 => Dtype::Bool,
        10 => Dtype::F16,
        11 => Dtype::F64,
        12 => Dtype::U32,
        13 => Dtype::U64,
        16 => Dtype::BF16,
        17 => Dtype::F8E4M3,
        19 => Dtype::F8E5M2,
        _ => {
            return Err(format!(
                "element type {elem} (complex, 4-bit or FNUZ 8-bit) has no tensor-file dtype"
            ))
        }
    })
}

/// The value of a one-element f32 or f64 tensor's bytes.
pub fn scalar_f64(elem: i32, bytes: &[u8]) -> Option<f64> {
    match (elem, bytes.len()) {
        (1, 4) => Some(f64::from(f32::from_le_bytes(bytes.try_into().ok()?))),
        (11, 8) => Some(f64::from_le_bytes(bytes.try_into().ok()?)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(elem: i32, dims: &[i64]) -> TensorProto {
        TensorProto {
            dims: dims.to_vec(),
            data_type: Some(elem),
            ..Default::default()
        }
    }

    #[test]
    fn raw_and_typed_data_give_the_same_little_endian_bytes() {
        let raw = TensorProto {
            raw_data: Some(
                [1.5f32, -2.0]
                    .iter()
                    .flat_map(|v| v.to_le_bytes())
                    .collect(),
            ),
            ..t(1, &[2])
        };
        let typed = TensorProto {
            float_data: vec![1.5, -2.0],
            ..t(1, &[2])
        };
        assert_eq!(
            tensor_bytes(&raw, 1, 2).unwrap(),
            tensor_bytes(&typed, 1, 2).unwrap()
        );
        let i64s = TensorProto {
            int64_data: vec![-1, 7],
            ..t(7, &[2])
        };
        assert_eq!(
            tensor_bytes(&i64s, 7, 2).unwrap().as_ref(),
            [(-1i64).to_le_bytes(), 7i64.to_le_bytes()].concat()
        );
        // FLOAT16 elements travel as 16-bit patterns in int32_data; BOOL as bytes.
        let half = TensorProto {
            int32_data: vec![0x3c00],
            ..t(10, &[1])
        };
        assert_eq!(tensor_bytes(&half, 10, 1).unwrap().as_ref(), [0x00, 0x3c]);
        let bools = TensorProto {
            int32_data: vec![1, 0, 1],
            ..t(9, &[3])
        };
        assert_eq!(tensor_bytes(&bools, 9, 3).unwrap().as_ref(), [1, 0, 1]);
        let doubles = TensorProto {
            double_data: vec![0.5],
            ..t(11, &[1])
        };
        assert_eq!(
            tensor_bytes(&doubles, 11, 1).unwrap().as_ref(),
            0.5f64.to_le_bytes()
        );
    }

    #[test]
    fn external_string_and_short_data_are_errors_saying_why() {
        let ext = TensorProto {
            external_data: vec![("location".into(), "weights.bin".into())],
            data_location: Some(1),
            ..t(1, &[4])
        };
        let e = tensor_bytes(&ext, 1, 4).unwrap_err();
        assert!(
            e.contains("\"weights.bin\"") && e.contains("load_external_data"),
            "{e}"
        );
        assert!(tensor_bytes(&t(8, &[1]), 8, 1)
            .unwrap_err()
            .contains("STRING"));
        let short = TensorProto {
            raw_data: Some(vec![0; 12]),
            ..t(1, &[4])
        };
        assert_eq!(
            tensor_bytes(&short, 1, 4).unwrap_err(),
            "raw_data holds 12 bytes, its type and shape need 16"
        );
        // No data at all for a non-empty tensor.
        assert!(tensor_bytes(&t(1, &[2]), 1, 2)
            .unwrap_err()
            .contains("holds 0 bytes"));
    }

    #[test]
    fn onnx_element_types_map_onto_tensor_file_dtypes() {
        assert_eq!(dtype_of(1), Ok(Dtype::F32));
        assert_eq!(dtype_of(7), Ok(Dtype::I64));
        assert_eq!(dtype_of(16), Ok(Dtype::BF16));
        assert!(dtype_of(14).is_err());
        assert_eq!(scalar_f64(1, &6.0f32.to_le_bytes()), Some(6.0));
        assert_eq!(scalar_f64(7, &6i64.to_le_bytes()), None);
    }
}
