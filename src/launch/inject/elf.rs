//! Finds the Python C API in a process by reading the ELF files it maps (the python executable
//! or libpython*.so): the runtime addresses of `Py_AddPendingCall` and `PyRun_SimpleString`,
//! and the interpreter version from `Py_Version` (3.11+).
//!
//! Nothing of the target is run. Each file is opened through /proc/PID/map_files (the very file
//! mapped) or /proc/PID/root/PATH with O_NOFOLLOW, and must have the device and inode that
//! /proc/PID/maps shows. The ELF comes from another user and may be hostile: every field is
//! checked, sizes are bounded, and a bad file gives a sentence, never a panic.

use std::fs::File;
use std::io::Read;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};

use object::{Object, ObjectSection, ObjectSegment, ObjectSymbol};

use crate::launch::target::file_name;
use crate::sys::proc::MapLine;

/// The largest ELF read (libpython is about 25 MiB, a static python about 10 MiB).
const ELF_LIMIT: u64 = 512 << 20;
/// The most mapped files read for the C API: a process that maps a thousand files named
/// libpython* must not make root read a thousand ELFs of up to [`ELF_LIMIT`].
const MAX_CANDIDATES: usize = 4;

/// Where the Python C API lives in a process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PythonImage {
    /// The file that exports it, as /proc/PID/maps names it.
    pub(crate) path: String,
    pub(crate) add_pending_call: u64,
    pub(crate) run_simple_string: u64,
    /// `(major, minor)` from `Py_Version`, on Python 3.11 and later.
    pub(crate) version: Option<(u32, u32)>,
}

/// The files worth reading for the C API: libpython first, then the executable itself (a
/// statically linked python). Each is the offset-0 mapping of its file.
fn candidates<'a>(maps: &'a [MapLine], exe: Option<&str>) -> Vec<&'a MapLine> {
    let exe = exe.map(|e| e.strip_suffix(" (deleted)").unwrap_or(e));
    let first_of = |wanted: &dyn Fn(&MapLine) -> bool| -> Vec<&'a MapLine> {
        let mut seen: Vec<&MapLine> = Vec::new();
        for line in maps
            .iter()
            .filter(|m| m.offset == 0 && m.inode != 0 && wanted(m))
        {
            if !seen.iter().any(|s| s.same_file(line)) {
                seen.push(line);
            }
        }
        seen
    };
    let mut found = first_of(&|m| file_name(&m.path).starts_with("libpython"));
    found.truncate(MAX_CANDIDATES - 1);
    found.extend(first_of(&|m| {
        exe.is_some_and(|e| m.path.strip_suffix(" (deleted)").unwrap_or(&m.path) == e)
    }));
    found.truncate(MAX_CANDIDATES);
    found
}

/// Finds the C API in process `pid`. `Ok(None)`: no mapped file exports it (not Python).
pub(crate) fn find_python(
    pid: u32,
    maps: &[MapLine],
    exe: Option<&str>,
) -> Result<Option<PythonImage>, String> {
    let mut problems = Vec::new();
    for line in candidates(maps, exe) {
        match read_mapped(pid, line).and_then(|data| python_image(&data, line, maps)) {
            Ok(Some(image)) => return Ok(Some(image)),
            Ok(None) => {}
            Err(e) => problems.push(e),
        }
    }
    if problems.is_empty() {
        Ok(None)
    } else {
        Err(problems.join(" "))
    }
}

/// The bytes of the file behind `line`, checked against its device and inode.
fn read_mapped(pid: u32, line: &MapLine) -> Result<Vec<u8>, String> {
    let by_map = format!("/proc/{pid}/map_files/{:x}-{:x}", line.start, line.end);
    let by_root = line
        .path
        .starts_with('/')
        .then(|| format!("/proc/{pid}/root{}", line.path));
    let mut last = String::new();
    for (path, nofollow) in [(Some(by_map), false), (by_root, true)] {
        let Some(path) = path else { continue };
        match open_if_same(&path, nofollow, line).and_then(read_elf) {
            Ok(data) => return Ok(data),
            Err(e) => last = e,
        }
    }
    Err(format!(
        "Cannot read {} as process {pid} maps it ({last}).",
        line.path
    ))
}

/// Opens `path` for reading only once it is known to be the regular file `line` maps. The
/// first open is `O_PATH`, which opens nothing: a device, FIFO or socket put where the file
/// was (through a directory of the path turned into a symlink, which `O_NOFOLLOW` does not
/// cover) is refused before root's open could have an effect on it (a watchdog, a tape
/// rewind, a terminal, a FIFO waiting for a writer). map_files entries are the kernel's own
/// links to the mapped file and must be followed; a path under /proc/PID/root is the
/// target's, and its last component must not be.
fn open_if_same(path: &str, nofollow: bool, line: &MapLine) -> Result<File, String> {
    let flags = libc::O_PATH | libc::O_CLOEXEC | if nofollow { libc::O_NOFOLLOW } else { 0 };
    let handle = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(flags)
        .open(path)
        .map_err(|e| format!("cannot open {path}: {e}"))?;
    let meta = handle.metadata().map_err(|e| e.to_string())?;
    let dev = meta.dev();
    let same = (libc::major(dev), libc::minor(dev), meta.ino())
        == (line.dev_major, line.dev_minor, line.inode);
    if !same {
        return Err("it is not the file that is mapped (device or inode differ)".to_string());
    }
    if !meta.is_file() || meta.len() > ELF_LIMIT {
        return Err(format!(
            "it is not a regular file of at most {} MiB",
            ELF_LIMIT >> 20
        ));
    }
    // The same inode, held by the handle: no swap can come between the check and this open.
    let reopen = format!("/proc/self/fd/{}", handle.as_raw_fd());
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(&reopen)
        .map_err(|e| format!("cannot open {path}: {e}"))
}

fn read_elf(file: File) -> Result<Vec<u8>, String> {
    let mut data = Vec::new();
    file.take(ELF_LIMIT)
        .read_to_end(&mut data)
        .map_err(|e| e.to_string())?;
    Ok(data)
}

fn host_architecture() -> object::Architecture {
    if cfg!(target_arch = "aarch64") {
        object::Architecture::Aarch64
    } else {
        object::Architecture::X86_64
    }
}

/// The C API of one ELF mapped at `line`; `Ok(None)` when it exports none.
pub(crate) fn python_image(
    data: &[u8],
    line: &MapLine,
    maps: &[MapLine],
) -> Result<Option<PythonImage>, String> {
    let bad = |why: &str| format!("{} is not a usable ELF file: {why}.", line.path);
    let file = object::File::parse(data).map_err(|e| bad(&e.to_string()))?;
    if file.format() != object::BinaryFormat::Elf
        || !file.is_64()
        || !file.is_little_endian()
        || file.architecture() != host_architecture()
    {
        return Err(bad("it is not a 64-bit little-endian ELF for this CPU"));
    }
    let Some(add_pending_call) = symbol(&file, "Py_AddPendingCall") else {
        return Ok(None);
    };
    let run_simple_string = symbol(&file, "PyRun_SimpleString")
        .ok_or_else(|| bad("it exports Py_AddPendingCall but not PyRun_SimpleString"))?;
    let bias = load_bias(&file, line.start)
        .ok_or_else(|| bad("its first PT_LOAD segment does not match its mapping"))?;
    let place = |sym: &object::Symbol| -> Result<u64, String> {
        let addr = bias
            .checked_add(sym.address())
            .ok_or_else(|| bad("a symbol address overflows"))?;
        let mapped = maps
            .iter()
            .any(|m| m.same_file(line) && m.executable() && m.start <= addr && addr < m.end);
        if mapped {
            Ok(addr)
        } else {
            Err(bad(&format!(
                "{} does not point into its executable mapping",
                sym.name().unwrap_or("a symbol")
            )))
        }
    };
    Ok(Some(PythonImage {
        path: line.path.clone(),
        add_pending_call: place(&add_pending_call)?,
        run_simple_string: place(&run_simple_string)?,
        version: symbol(&file, "Py_Version").and_then(|s| py_version(&file, &s)),
    }))
}

/// A defined symbol by name, from .dynsym first, then .symtab.
fn symbol<'data, 'file>(
    file: &'file object::File<'data>,
    name: &str,
) -> Option<object::Symbol<'data, 'file>> {
    file.dynamic_symbols()
        .chain(file.symbols())
        .find(|s| s.is_definition() && s.address() != 0 && s.name() == Ok(name))
}

/// Runtime address minus link-time address: where the mapping of file offset 0 starts, minus
/// the virtual address that the first PT_LOAD gives to file offset 0.
fn load_bias(file: &object::File, map_start: u64) -> Option<u64> {
    let first = file.segments().next()?;
    let (offset, _) = first.file_range();
    let vaddr_of_offset_0 = first.address().checked_sub(offset)?;
    map_start.checked_sub(vaddr_of_offset_0)
}

/// `(major, minor)` from the `Py_Version` word (PY_VERSION_HEX, e.g. 0x030b07f0).
fn py_version(file: &object::File, sym: &object::Symbol) -> Option<(u32, u32)> {
    let section = file.section_by_index(sym.section_index()?).ok()?;
    let bytes = section.data_range(sym.address(), 4).ok()??;
    let hex = u32::from_le_bytes(bytes.try_into().ok()?);
    let (major, minor) = (hex >> 24, (hex >> 16) & 0xff);
    (major == 3).then_some((major, minor))
}

/// The runtime address of `name` in the first file mapped at offset 0 whose name starts with
/// `prefix` (libc's `pause`, say), for tests that need a function that does not return.
#[cfg(test)]
pub(crate) fn runtime_symbol(pid: u32, maps: &[MapLine], prefix: &str, name: &str) -> Option<u64> {
    let line = maps
        .iter()
        .find(|m| m.offset == 0 && file_name(&m.path).starts_with(prefix))?;
    let data = read_mapped(pid, line).ok()?;
    let file = object::File::parse(&*data).ok()?;
    let sym = symbol(&file, name)?;
    load_bias(&file, line.start)?.checked_add(sym.address())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(path: &str, start: u64, offset: u64, perms: &str, inode: u64) -> MapLine {
        MapLine {
            start,
            end: start + 0x1000,
            perms: perms.to_string(),
            offset,
            dev_major: 1,
            dev_minor: 2,
            inode,
            path: path.to_string(),
        }
    }

    #[test]
    fn libpython_before_the_executable_and_each_file_once() {
        let maps = vec![
            line("/usr/bin/python3", 0x1000, 0, "r--p", 10),
            line("/usr/bin/python3", 0x2000, 0x1000, "r-xp", 10),
            line("/lib/libpython3.11.so.1.0", 0x9000, 0, "r--p", 11),
            line("/lib/libpython3.11.so.1.0", 0xa000, 0, "r--p", 11),
            line("/lib/libc.so.6", 0x7000, 0, "r--p", 12),
        ];
        let found = candidates(&maps, Some("/usr/bin/python3"));
        let paths: Vec<_> = found.iter().map(|m| (m.path.as_str(), m.start)).collect();
        assert_eq!(
            paths,
            [
                ("/lib/libpython3.11.so.1.0", 0x9000),
                ("/usr/bin/python3", 0x1000)
            ]
        );
        let deleted = candidates(&maps, Some("/usr/bin/python3 (deleted)"));
        assert_eq!(deleted.len(), 2);
    }

    /// A review: a FIFO put where a mapped file was held root's attach in open() for ever.
    #[test]
    fn a_fifo_where_a_mapped_file_was_is_refused_without_waiting() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("libpython3.11.so.1.0");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        // No mapping has this range, so the map_files link is missing and the path is tried.
        let at = line(fifo.to_str().unwrap(), 0x1000, 0, "r--p", 5);
        let pid = std::process::id();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || tx.send(read_mapped(pid, &at)));
        let outcome = rx
            .recv_timeout(crate::test_ci::PATIENCE)
            .expect("read_mapped waited on a FIFO");
        let error = outcome.unwrap_err();
        assert!(error.contains("not the file that is mapped"), "{error}");
    }

    /// A review: a directory of the mapped path turned into a symlink led root's open to a
    /// device node (/dev/watchdog, a tape), whose open alone has effects, since `O_NOFOLLOW`
    /// covers the last component only. A FIFO stands in for the device, and inotify tells
    /// whether it was opened.
    #[test]
    fn a_node_behind_a_symlinked_directory_is_never_opened() {
        let dir = tempfile::tempdir().unwrap();
        let devices = dir.path().join("devices");
        std::fs::create_dir(&devices).unwrap();
        let node = devices.join("libpython3.11.so.1.0");
        nix::unistd::mkfifo(&node, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        std::os::unix::fs::symlink(&devices, dir.path().join("lib")).unwrap();
        let mapped = dir.path().join("lib").join("libpython3.11.so.1.0");
        // SAFETY: inotify_init1 takes flags only; the descriptor is owned below.
        let raw = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
        assert!(raw >= 0, "{}", std::io::Error::last_os_error());
        // SAFETY: a fresh descriptor nothing else owns.
        let inotify = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(raw) };
        let watched = std::ffi::CString::new(node.to_str().unwrap()).unwrap();
        // SAFETY: a valid inotify descriptor and a NUL-terminated path.
        let watch = unsafe { libc::inotify_add_watch(raw, watched.as_ptr(), libc::IN_OPEN) };
        assert!(watch >= 0, "{}", std::io::Error::last_os_error());

        let at = line(mapped.to_str().unwrap(), 0x1000, 0, "r--p", 5);
        let error = read_mapped(std::process::id(), &at).unwrap_err();
        assert!(error.contains("not the file that is mapped"), "{error}");
        let mut events = [0u8; 256];
        // SAFETY: reads into a buffer of its stated length from the descriptor owned above.
        let got = unsafe { libc::read(inotify.as_raw_fd(), events.as_mut_ptr().cast(), 256) };
        assert!(
            got < 0,
            "the node was opened ({got} bytes of inotify events)"
        );
    }

    /// A process that maps many files named libpython* gets at most a few read, the
    /// executable among them.
    #[test]
    fn at_most_a_few_mapped_files_are_read() {
        let mut maps: Vec<MapLine> = (0..100)
            .map(|i| {
                line(
                    &format!("/tmp/libpython{i}.so"),
                    0x10_0000 * (i + 1),
                    0,
                    "r--p",
                    100 + i,
                )
            })
            .collect();
        maps.push(line("/usr/bin/python3", 0x1000, 0, "r--p", 10));
        let found = candidates(&maps, Some("/usr/bin/python3"));
        assert_eq!(found.len(), MAX_CANDIDATES);
        assert_eq!(found.last().unwrap().path, "/usr/bin/python3");
    }

    #[test]
    fn hostile_bytes_give_sentences() {
        let at = line("/tmp/evil", 0x1000, 0, "r--p", 5);
        for data in [
            &b""[..],
            b"\x7fELF",
            b"\x7fELF\x02\x01\x01\0\0\0\0\0\0\0\0\0\x03\0\x3e\0\x01\0\0\0garbage",
            &[0xff; 4096][..],
        ] {
            let err = python_image(data, &at, std::slice::from_ref(&at)).unwrap_err();
            assert!(
                err.starts_with("/tmp/evil is not a usable ELF file"),
                "{err}"
            );
        }
    }

    #[test]
    fn a_truncated_or_corrupted_real_python_gives_sentences_not_panics() {
        let Ok(real) =
            std::fs::read("/usr/bin/python3.11").or_else(|_| std::fs::read("/usr/bin/python3"))
        else {
            crate::test_ci::skip_or_fail("no system python3 (/usr/bin/python3) to read");
            return;
        };
        let at = line("/usr/bin/python3", 0x40_0000, 0, "r--p", 5);
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        for cut in [16, 64, 65, 1000, 4096, real.len() / 2, real.len() - 1] {
            let _ = python_image(&real[..cut], &at, std::slice::from_ref(&at));
        }
        for _ in 0..200 {
            let mut bad = real.clone();
            for _ in 0..64 {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                // Mostly the headers and tables, where a parser trusts offsets and sizes.
                let at_head = (seed as usize) % 8192;
                let anywhere = (seed >> 20) as usize % bad.len();
                let i = if seed & 1 == 0 { at_head } else { anywhere };
                bad[i] ^= (seed >> 40) as u8 | 1;
            }
            let _ = python_image(&bad, &at, std::slice::from_ref(&at));
        }
    }

    #[test]
    fn a_real_python_resolves_into_its_own_text() {
        let Some(python) = ["/usr/bin/python3.11", "/usr/bin/python3"]
            .into_iter()
            .find(|p| std::path::Path::new(p).exists())
        else {
            crate::test_ci::skip_or_fail("no system python3 (/usr/bin/python3) to read");
            return;
        };
        let mut child = std::process::Command::new(python)
            .args(["-c", "import time; time.sleep(30)"])
            .spawn()
            .unwrap();
        let pid = child.id();
        let wanted = std::fs::canonicalize(python).unwrap();
        let deadline = std::time::Instant::now() + crate::test_ci::PATIENCE;
        // Until exec completes, the child is a copy of this test binary, then a bare python.
        let image = loop {
            let exe = std::fs::read_link(format!("/proc/{pid}/exe")).ok();
            if exe.as_ref() == Some(&wanted) {
                let maps = crate::sys::proc::parse_maps(
                    &std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap(),
                );
                let found = find_python(pid, &maps, wanted.to_str());
                if matches!(found, Ok(Some(_))) || std::time::Instant::now() > deadline {
                    break found;
                }
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the child never became {python}"
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        };
        let _ = child.kill();
        let _ = child.wait();
        let image = image.unwrap().expect("python exports Py_AddPendingCall");
        assert_ne!(image.add_pending_call, image.run_simple_string);
        assert!(
            image.version.is_none_or(|(major, _)| major == 3),
            "{image:?}"
        );
    }
}
