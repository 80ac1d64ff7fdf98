//! Tests of the NVML source that need no GPU: version text, throttle names, process lists, a
//! missing library.

use std::path::Path;

use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::struct_wrappers::device::ProcessInfo;

use super::processes::merge_process_lists;
use super::*;
use crate::model::{GpuProcess, ProcessKind};

#[test]
fn cuda_version_is_major_dot_minor() {
    assert_eq!(format_cuda_version(12040), "12.4");
    assert_eq!(format_cuda_version(11080), "11.8");
}

#[test]
fn throttle_bits_become_names_and_unknown_bits_survive() {
    assert_eq!(
        throttle_reason_names(0x4 | 0x40),
        ["sw_power_cap", "hw_thermal_slowdown"]
    );
    assert_eq!(throttle_reason_names(0x1000), ["unknown_0x1000"]);
    assert!(throttle_reason_names(0).is_empty());
}

#[test]
fn throttle_names_are_shared_while_the_mask_recurs() {
    let mut names = ThrottleNames::default();
    let first = names.of(0x4);
    assert!(std::sync::Arc::ptr_eq(&first, &names.of(0x4)));
    assert_eq!(&*names.of(0x8), ["hw_slowdown"]);
    assert!(std::sync::Arc::ptr_eq(&first, &names.of(0x4)));
    for mask in [0x1, 0x2, 0x10, 0x20] {
        names.of(mask);
    }
    assert!(!std::sync::Arc::ptr_eq(&first, &names.of(0x4)));
}

#[test]
fn a_pid_in_both_lists_is_one_row() {
    let info = |pid, bytes| ProcessInfo {
        pid,
        used_gpu_memory: UsedGpuMemory::Used(bytes),
        gpu_instance_id: None,
        compute_instance_id: None,
    };
    let mut rows = vec![GpuProcess::new(99, 0, ProcessKind::Graphics)];
    merge_process_lists(2, &[info(10, 100), info(11, 5)], &[info(10, 50)], &mut rows);
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0].kind, ProcessKind::Both);
    assert_eq!(rows[0].gpu_memory_bytes, Some(100));
    assert_eq!(rows[1].gpu, 2);
}

#[test]
fn a_missing_library_says_which_file() {
    let source = NvmlSource::load(Path::new("/nonexistent/libnvidia-ml.so.1"));
    let info = source.driver_info();
    assert!(!info.nvml_loaded);
    let error = info.error.unwrap();
    assert!(error.contains("/nonexistent/libnvidia-ml.so.1"), "{error}");
    assert_eq!(source.device_count(), Ok(0));
}
