//! Which GPU processes are training: the rules that give training advice ask here first, so an
//! inference server, a notebook or a video encode never gets told to raise `num_workers`.
//!
//! A process trains when its agent reports a step counter, or it is not a known server or
//! notebook and either has an agent or was started by a distributed launcher: RANK, LOCAL_RANK
//! or WORLD_SIZE in its environment (torchrun, torch.distributed.launch, DeepSpeed, Accelerate
//! and Lightning all set them), or a parent that is a launcher (`LaunchEnv::launcher`), or it
//! is a task of a Slurm step of several (plain `srun`). Servers are told apart from notebooks and
//! media work too: only servers fill a GPU on purpose.

use crate::model::GpuProcess;

/// Words in a command line that mark a server: processes that hold a GPU without a training
/// loop, and the kind that reserves most of a GPU up front on purpose (vLLM's
/// `gpu_memory_utilization`, SGLang's `mem_fraction_static`). Launchers of sharded inference
/// (TGI) set RANK too.
const SERVERS: &[&str] = &[
    "vllm",
    "sglang",
    "text-generation",
    "tritonserver",
    "torchserve",
    "uvicorn",
    "gunicorn",
    "ollama",
    "llama-server",
];

/// Words that mark a notebook kernel or media work: no training loop either, but nothing that
/// fills a GPU by design, so a full GPU is as much a risk with them as with any script.
const NOTEBOOKS_AND_MEDIA: &[&str] = &["ipykernel", "jupyter", "ffmpeg", "gstreamer", "gst-launch"];

/// Whether the process looks like a training process (see the module doc).
pub(crate) fn is_training(process: &GpuProcess) -> bool {
    if process.torch.as_ref().is_some_and(|t| t.step.is_some()) {
        return true;
    }
    if looks_like_serving(process) {
        return false;
    }
    let launched = process.env.as_ref().is_some_and(|e| {
        e.rank.is_some() || e.local_rank.is_some() || e.world_size.is_some() || e.launcher.is_some()
    });
    // A task of a Slurm step of several (plain `srun`, no torchrun): one rank of a job.
    let srun_task = (process.slurm.as_ref()).is_some_and(|s| s.ntasks.is_some_and(|n| n > 1));
    process.torch.is_some() || launched || srun_task
}

/// Whether the command line names a server, a notebook kernel or media work.
pub(crate) fn looks_like_serving(process: &GpuProcess) -> bool {
    names_any(process, SERVERS) || names_any(process, NOTEBOOKS_AND_MEDIA)
}

/// Whether the command line names an inference server (not a notebook, not media work).
pub(crate) fn looks_like_server(process: &GpuProcess) -> bool {
    names_any(process, SERVERS)
}

fn names_any(process: &GpuProcess, words: &[&str]) -> bool {
    let Some(command) = process.command.as_deref() else {
        return false;
    };
    words
        .iter()
        .any(|word| contains_ignoring_ascii_case(command, word))
}

/// Whether `text` contains `word` (lowercase ASCII), in any ASCII case, without a lowercase
/// copy of `text`: the rules ask this of every process each tick.
fn contains_ignoring_ascii_case(text: &str, word: &str) -> bool {
    let word = word.as_bytes();
    word.is_empty()
        || (text.as_bytes())
            .windows(word.len())
            .any(|window| window.eq_ignore_ascii_case(word))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{LaunchEnv, TorchInfo};
    use crate::rules::testkit::process;

    fn with(command: &str, env: Option<LaunchEnv>, torch: Option<TorchInfo>) -> GpuProcess {
        let mut p = process(7, 0, 1 << 30);
        p.command = Some(command.into());
        p.env = env.map(Into::into);
        p.torch = torch.map(Into::into);
        p
    }

    fn ranked() -> Option<LaunchEnv> {
        Some(LaunchEnv {
            rank: Some(0),
            ..Default::default()
        })
    }

    #[test]
    fn launcher_variables_or_an_agent_make_a_training_process() {
        assert!(is_training(&with("python train.py", ranked(), None)));
        let agent = Some(TorchInfo::default());
        assert!(is_training(&with("python train.py", None, agent)));
        assert!(!is_training(&with(
            "python eval.py",
            Some(LaunchEnv::default()),
            None
        )));
        assert!(!is_training(&with("python eval.py", None, None)));
        let spawned = Some(LaunchEnv {
            launcher: Some("torchrun".into()),
            ..Default::default()
        });
        assert!(is_training(&with("python train.py", spawned, None)));
        // Plain `srun -n 2 python train.py`: SLURM_* only, no RANK.
        let task = |ntasks: u32| {
            let mut p = with("python train.py", None, None);
            p.slurm = Some(std::sync::Arc::new(crate::model::SlurmTask {
                job_id: "77".into(),
                proc_id: Some(1),
                ntasks: Some(ntasks),
                ..Default::default()
            }));
            p
        };
        assert!(is_training(&task(2)));
        assert!(!is_training(&task(1)), "a step of one task is no job");
    }

    #[test]
    fn servers_notebooks_and_encoders_are_not_training_even_with_rank_set() {
        for command in [
            "python -m vllm.entrypoints.openai.api_server --model x",
            "text-generation-server serve bigscience/bloom --sharded",
            "/usr/bin/python3 -m ipykernel_launcher -f kernel.json",
            "ffmpeg -hwaccel cuda -i in.mp4 out.mp4",
        ] {
            assert!(!is_training(&with(command, ranked(), None)), "{command}");
        }
        let stepping = Some(TorchInfo {
            step: Some(3),
            ..Default::default()
        });
        assert!(is_training(&with("jupyter-lab", None, stepping)));
    }

    #[test]
    fn only_inference_servers_count_as_servers() {
        let server = with("python -m vllm.entrypoints.openai.api_server", None, None);
        assert!(looks_like_server(&server));
        for command in [
            "/usr/bin/python3 -m ipykernel_launcher -f kernel.json",
            "ffmpeg -hwaccel cuda -i in.mp4 out.mp4",
            "python3 notebook_cell.py",
        ] {
            let p = with(command, None, None);
            assert!(!looks_like_server(&p), "{command}");
        }
    }
}
