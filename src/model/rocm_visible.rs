//! How a ROCm process numbers the AMD GPUs it sees, so that torch's `cuda:N` (ROCm builds of
//! torch keep the `torch.cuda` API) can be matched to a GPU row.
//!
//! ROCr applies `ROCR_VISIBLE_DEVICES` first (indices among all AMD GPUs, or `GPU-<unique id>`
//! UUIDs); HIP then applies `HIP_VISIBLE_DEVICES`, or `CUDA_VISIBLE_DEVICES` when that is unset,
//! as indices into what ROCr left. torch's ordinal is the position in the result. Without
//! either variable, the ordinal is the GPU's position among the AMD GPUs (PCI order).

use super::gpu::{GpuSample, GpuVendor};
use super::process::LaunchEnv;

/// torch's ordinal for AMD GPU `gpu` in a process with environment `env`; `None` when the
/// process cannot see that GPU.
pub(crate) fn rocm_ordinal(env: &LaunchEnv, gpu: &GpuSample, gpus: &[GpuSample]) -> Option<u32> {
    let mut amd: Vec<&GpuSample> = gpus.iter().filter(|g| g.vendor == GpuVendor::Amd).collect();
    amd.sort_by_key(|g| g.vendor_index);
    let mut visible = amd.clone();
    if let Some(list) = &env.rocr_visible_devices {
        visible = entries(list)
            .filter_map(|entry| match entry.parse::<u32>() {
                Ok(n) => amd.iter().find(|g| g.vendor_index == Some(n)).copied(),
                Err(_) => amd
                    .iter()
                    .find(|g| {
                        g.uuid
                            .as_deref()
                            .is_some_and(|u| u.eq_ignore_ascii_case(entry))
                    })
                    .copied(),
            })
            .collect();
    }
    let hip = env
        .hip_visible_devices
        .as_ref()
        .or(env.cuda_visible_devices.as_ref());
    if let Some(list) = hip {
        // Like CUDA, HIP stops at the first entry that is not a valid index.
        visible = entries(list)
            .map_while(|entry| visible.get(entry.parse::<usize>().ok()?).copied())
            .collect();
    }
    let position = visible
        .iter()
        .position(|g| g.vendor_index == gpu.vendor_index)?;
    u32::try_from(position).ok()
}

fn entries(list: &str) -> impl Iterator<Item = &str> {
    list.split(',').map(str::trim).filter(|e| !e.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node() -> Vec<GpuSample> {
        let nvidia = GpuSample {
            index: 0,
            ..Default::default()
        };
        let amd = |index: u32, rocm: u32, uuid: &str| GpuSample {
            index,
            vendor: GpuVendor::Amd,
            vendor_index: Some(rocm),
            uuid: Some(uuid.to_string().into()),
            ..Default::default()
        };
        vec![
            nvidia,
            amd(1, 0, "GPU-aa"),
            amd(2, 1, "GPU-bb"),
            amd(3, 2, "GPU-cc"),
        ]
    }

    fn ordinal(env: LaunchEnv, index: usize) -> Option<u32> {
        let gpus = node();
        rocm_ordinal(&env, &gpus[index], &gpus)
    }

    #[test]
    fn without_variables_the_amd_position_counts() {
        assert_eq!(ordinal(LaunchEnv::default(), 3), Some(2));
    }

    #[test]
    fn hip_indexes_into_what_rocr_left() {
        let env = LaunchEnv {
            rocr_visible_devices: Some("2,GPU-BB".into()),
            hip_visible_devices: Some("1".into()),
            ..Default::default()
        };
        assert_eq!(
            ordinal(env.clone(), 2),
            Some(0),
            "GPU-bb is ROCr's 1, HIP's 0"
        );
        assert_eq!(ordinal(env, 3), None, "hidden by HIP");
        let rocr = LaunchEnv {
            rocr_visible_devices: Some("2,GPU-BB".into()),
            ..Default::default()
        };
        assert_eq!(ordinal(rocr, 3), Some(0));
    }

    #[test]
    fn cuda_visible_devices_stands_in_for_hip_and_stops_at_a_bad_entry() {
        let env = LaunchEnv {
            cuda_visible_devices: Some("2,x,0".into()),
            ..Default::default()
        };
        assert_eq!(ordinal(env.clone(), 3), Some(0));
        assert_eq!(ordinal(env, 1), None);
    }
}
