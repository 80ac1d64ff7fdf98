//! Root's census of users, for the agents of processes that hold no GPU: a rank still loading
//! its data, a job before its first CUDA call, a process whose GPU this machine's NVML does not
//! list. Root learns the directories other users' agents serve in from their GPU processes'
//! environments ([`super::dirs`]), so such an agent of another user was never found, while the
//! monitor's own user saw it as a row of its own.
//!
//! Every [`CENSUS_EVERY`] the census lists the two places an agent serves in when nothing
//! names another, `/run/user` (the usual `XDG_RUNTIME_DIR` is `/run/user/<uid>`) and `/tmp`
//! (`/tmp/torchtop-<uid>`), and takes the uids their entries name, the monitor's own left out
//! (the lowest [`MAX_CENSUS_UIDS`] of them). Two directory listings, a few hundred entries on
//! most machines, at most [`MAX_CENSUS_ENTRIES`] each: no walk of `/proc`, and no environment
//! of a process that holds no GPU is read. Each such uid's `/run/user/<uid>/torchtop` and
//! `/tmp/torchtop-<uid>` then get one `lstat`. One found as the agent makes it (that uid's own,
//! mode 0700, not a symlink) is read as a user's directory, on the same terms as one a GPU
//! process names; it counts among that uid's [`super::dirs::MAX_DIRS_PER_USER`], and the census
//! leaves room for the directories GPU processes name ([`super::dirs::KEPT_FOR_NAMED`]). One the
//! census no longer finds (removed, or no longer theirs) is dropped like a directory no GPU
//! process names any more. A directory an agent left behind when its process ended is read
//! too: it is listed again only when it changes.

use std::mem::MaybeUninit;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rustix::fs::{AtFlags, FileType, Mode, OFlags, RawDir};

use super::dirs::Watched;
use super::AgentHub;
use crate::model::AgentDirVars;
use crate::protocol::sockets::check_socket_dir;

/// The longest a directory made in a default place waits to be found.
pub(super) const CENSUS_EVERY: Duration = Duration::from_secs(10);
/// Entries read from each of `/run/user` and `/tmp` per census: a bound on its cost when a
/// user fills `/tmp`.
const MAX_CENSUS_ENTRIES: usize = 16_384;
/// The uids whose default directories are looked at, lowest first: the machine's users come
/// before the ranges of uids that user namespaces map (100000 and up, usually).
pub(super) const MAX_CENSUS_UIDS: usize = 1024;
/// The room for directory entries read at once (an entry of `/tmp` takes 24 to 50 bytes).
const DIRENT_BYTES: usize = 8192;

/// The two default places of a uid's agent directory.
#[derive(Debug, Clone, Copy)]
enum Place {
    /// `/run/user/<uid>/torchtop`, with `XDG_RUNTIME_DIR` set as a login sets it.
    Runtime,
    /// `/tmp/torchtop-<uid>`, with neither `TORCHTOP_AGENT_DIR` nor `XDG_RUNTIME_DIR` set.
    Tmp,
}

/// The census: where it looks, what it found last, and when it looks again.
pub(super) struct Census {
    /// `/run/user` and `/tmp` (a test's scratch directories instead).
    run_user: PathBuf,
    tmp: PathBuf,
    /// The uids the default places named at the last census, sorted, at most
    /// [`MAX_CENSUS_UIDS`].
    uids: Vec<u32>,
    next_at: Option<Instant>,
    /// The places found with more than [`MAX_CENSUS_ENTRIES`] entries, each said once.
    cut_short: Vec<PathBuf>,
    told: usize,
    /// The listings' buffer, kept: `std::fs::read_dir` copies each entry's name, and a `/tmp`
    /// of 140 entries made the census most of a steady monitor's allocations.
    dirents: Vec<MaybeUninit<u8>>,
}

impl Default for Census {
    fn default() -> Self {
        Census::under(Path::new("/"))
    }
}

impl Census {
    /// A census of the default places under `root`.
    pub(super) fn under(root: &Path) -> Self {
        Census {
            run_user: root.join("run/user"),
            tmp: root.join("tmp"),
            uids: Vec::new(),
            next_at: None,
            cut_short: Vec::new(),
            told: 0,
            dirents: Vec::new(),
        }
    }

    fn due(&self, now: Instant) -> bool {
        self.next_at.is_none_or(|at| now >= at)
    }

    /// Lists the uids the default places name into `uids`, and sets the time of the next
    /// census.
    fn take(&mut self, now: Instant) {
        self.uids.clear();
        let (dirents, uids) = (&mut self.dirents, &mut self.uids);
        let run_user = uids_named_in(&self.run_user, "", dirents, uids);
        let tmp = uids_named_in(&self.tmp, "torchtop-", dirents, uids);
        for (complete, place) in [(run_user, &self.run_user), (tmp, &self.tmp)] {
            if !complete && !self.cut_short.contains(place) {
                self.cut_short.push(place.clone());
            }
        }
        self.uids.sort_unstable();
        self.uids.dedup();
        self.uids.truncate(MAX_CENSUS_UIDS);
        self.next_at = Some(now + CENSUS_EVERY);
    }

    fn path(&self, place: Place, uid: u32) -> PathBuf {
        match place {
            Place::Runtime => self.run_user.join(uid.to_string()).join("torchtop"),
            Place::Tmp => self.tmp.join(format!("torchtop-{uid}")),
        }
    }

    /// The environment under which a process of `uid` names `place`'s directory, so that one
    /// of its GPU processes that does finds the same entry.
    fn vars(&self, place: Place, uid: u32, mount_ns: Option<u64>) -> AgentDirVars {
        let runtime = self.run_user.join(uid.to_string());
        AgentDirVars {
            torchtop_agent_dir: None,
            xdg_runtime_dir: matches!(place, Place::Runtime).then(|| runtime.display().to_string()),
            mount_ns,
        }
    }
}

/// Pushes the uid each entry of `dir` names as `<prefix><uid>` onto `uids`, when the entry is
/// a directory that uid owns; false when the listing stopped at [`MAX_CENSUS_ENTRIES`]. What is
/// not a uid, what is not its own directory, and a `dir` that cannot be listed add nothing: the
/// census only finds where to look. Anyone can make `/tmp/torchtop-<any number>`, and the
/// lowest [`MAX_CENSUS_UIDS`] are kept: without the owner a user who made a thousand of them
/// took every place, and other users' agents that hold no GPU went unseen.
fn uids_named_in(
    dir: &Path,
    prefix: &str,
    dirents: &mut Vec<MaybeUninit<u8>>,
    uids: &mut Vec<u32>,
) -> bool {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let Ok(fd) = rustix::fs::open(dir, flags, Mode::empty()) else {
        return true;
    };
    dirents.resize(DIRENT_BYTES, MaybeUninit::uninit());
    let mut entries = RawDir::new(&fd, dirents);
    let mut read = 0;
    while let Some(entry) = entries.next() {
        let Ok(entry) = entry else {
            return true;
        };
        let name = entry.file_name().to_bytes();
        if name == b"." || name == b".." {
            continue;
        }
        if read == MAX_CENSUS_ENTRIES {
            return false;
        }
        read += 1;
        let uid = (std::str::from_utf8(name).ok())
            .and_then(|name| name.strip_prefix(prefix))
            .filter(|digits| !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|digits| digits.parse::<u32>().ok());
        // The entry's own type, then one `lstat` for a name that passed.
        let own = |uid: &u32| {
            matches!(entry.file_type(), FileType::Directory | FileType::Unknown)
                && rustix::fs::statat(&fd, entry.file_name(), AtFlags::SYMLINK_NOFOLLOW).is_ok_and(
                    |st| {
                        FileType::from_raw_mode(st.st_mode) == FileType::Directory
                            && st.st_uid == *uid
                    },
                )
        };
        uids.extend(uid.filter(own));
    }
    true
}

impl AgentHub {
    /// Root only, from [`AgentHub::watch_users`]: when a census is due, takes it and watches
    /// the default directories of the uids it found.
    pub(super) fn watch_default_dirs(&mut self, now: Instant) {
        if !self.census.due(now) {
            return;
        }
        self.census.take(now);
        while self.census.told < self.census.cut_short.len() {
            let place = crate::format::path::named(&self.census.cut_short[self.census.told]);
            let line = format!(
                "{place} holds more than {MAX_CENSUS_ENTRIES} entries; the agents of users' \
                 processes that hold no GPU may be missed there"
            );
            self.census.told += 1;
            self.push_log(line);
        }
        let uids = std::mem::take(&mut self.census.uids);
        self.watch_defaults_of(&uids, now);
        self.census.uids = uids;
    }

    /// Marks as the census's (adding those not watched yet) the default directories of `uids`
    /// that are theirs, and no other directory.
    fn watch_defaults_of(&mut self, uids: &[u32], now: Instant) {
        for dir in &mut self.dirs {
            dir.census = false;
        }
        let own = self.own_uid;
        for &uid in uids.iter().filter(|&&uid| uid != own) {
            for place in [Place::Runtime, Place::Tmp] {
                self.watch_default(uid, place, now);
            }
        }
    }

    fn watch_default(&mut self, uid: u32, place: Place, now: Instant) {
        let path = self.census.path(place, uid);
        // One `lstat`. A directory no process named and that is not as an agent makes it is
        // not worth a line in the log: it is left alone.
        if !matches!(check_socket_dir(&path), Ok(Some(checked)) if checked.owner == uid) {
            return;
        }
        let known = (self.dirs.iter_mut())
            .find(|d| d.user == Some(uid) && d.via.is_none() && d.path == path);
        if let Some(dir) = known {
            dir.census = true;
            dir.last_wanted = now;
            return;
        }
        if !self.room_for(uid, true) {
            return;
        }
        let vars = self.census.vars(place, uid, self.own_mount_ns);
        let mut dir = Watched::of_user(Some(uid), path, vars, None, now);
        dir.census = true;
        self.push_user_dir(dir);
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::super::dirs::{KEPT_FOR_NAMED, MAX_DIRS_PER_USER, MAX_USER_DIRS};
    use super::*;
    use crate::protocol::socket_dir_from;

    /// A root monitor whose census looks for default directories under `root`. The test's own
    /// uid plays a user: the monitor is of another uid.
    fn hub_under(root: &Path) -> AgentHub {
        let mut hub = AgentHub::new(PathBuf::from("/nonexistent/torchtop-own"));
        hub.reads_other_users = true;
        hub.own_uid = u32::MAX;
        hub.census = Census::under(root);
        hub
    }

    fn me() -> u32 {
        crate::sys::effective_uid()
    }

    fn agent_dir(path: &Path, mode: u32) -> PathBuf {
        std::fs::create_dir_all(path).unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
        path.to_path_buf()
    }

    /// Each user's directory: (path, uid, whether the census found it).
    fn users_dirs(hub: &AgentHub) -> Vec<(PathBuf, Option<u32>, bool)> {
        (hub.dirs.iter().filter(|d| d.user.is_some()))
            .map(|d| (d.path.clone(), d.user, d.census))
            .collect()
    }

    fn named(path: &str) -> AgentDirVars {
        AgentDirVars {
            torchtop_agent_dir: Some(path.to_string()),
            ..AgentDirVars::default()
        }
    }

    #[test]
    fn the_default_places_are_where_that_uids_agent_serves_when_nothing_names_another() {
        let census = Census::default();
        for (place, path) in [
            (Place::Runtime, "/run/user/1000/torchtop"),
            (Place::Tmp, "/tmp/torchtop-1000"),
        ] {
            let vars = census.vars(place, 1000, None);
            let runtime = vars.xdg_runtime_dir.as_deref().map(AsRef::as_ref);
            assert_eq!(census.path(place, 1000), Path::new(path));
            assert_eq!(socket_dir_from(None, runtime, 1000), Path::new(path));
        }
    }

    #[test]
    fn each_uids_default_directories_are_read_while_they_are_its_own() {
        let root = tempfile::tempdir().unwrap();
        let (me, other) = (me(), me().wrapping_add(1));
        let runtime = agent_dir(&root.path().join(format!("run/user/{me}/torchtop")), 0o700);
        let tmp = agent_dir(&root.path().join(format!("tmp/torchtop-{me}")), 0o700);
        // Named after another uid, but not that uid's own.
        agent_dir(&root.path().join(format!("tmp/torchtop-{other}")), 0o700);
        let mut hub = hub_under(root.path());
        let now = Instant::now();

        hub.watch_defaults_of(&[me, other], now);
        let found = [
            (runtime.clone(), Some(me), true),
            (tmp.clone(), Some(me), true),
        ];
        assert_eq!(users_dirs(&hub), found);
        hub.watch_defaults_of(&[me, other], now + CENSUS_EVERY);
        assert_eq!(users_dirs(&hub), found, "each is watched once");

        // Open to others now: an agent would not serve there, and the census lets it go.
        std::fs::set_permissions(&runtime, std::fs::Permissions::from_mode(0o755)).unwrap();
        hub.watch_defaults_of(&[me, other], now + CENSUS_EVERY * 2);
        let left = [(runtime, Some(me), false), (tmp.clone(), Some(me), true)];
        assert_eq!(users_dirs(&hub), left);

        // The directories are gone from the default places: they go once nothing wants them.
        hub.watch_defaults_of(&[other], now + CENSUS_EVERY * 3);
        hub.census.next_at = Some(now + CENSUS_EVERY * 100);
        hub.watch_users(std::iter::empty(), now + CENSUS_EVERY * 6);
        assert_eq!(users_dirs(&hub), []);
        assert_eq!(
            hub.log(),
            Vec::<String>::new(),
            "nothing here is worth a line"
        );
    }

    /// A directory made after a census is found at the next one, not before: between two, the
    /// default places cost nothing.
    #[test]
    fn a_missing_directory_is_looked_for_again_only_at_the_next_census() {
        let root = tempfile::tempdir().unwrap();
        let me = me();
        let mut hub = hub_under(root.path());
        let now = Instant::now();
        hub.watch_users(std::iter::empty(), now);
        assert!(hub.census.uids.is_empty(), "nothing in the default places");
        assert_eq!(users_dirs(&hub), []);
        let next = hub.census.next_at.expect("the next census");
        assert!(next >= now + CENSUS_EVERY);

        let tmp = agent_dir(&root.path().join(format!("tmp/torchtop-{me}")), 0o700);
        hub.watch_users(std::iter::empty(), now + (next - now) / 2);
        assert_eq!(users_dirs(&hub), [], "looked for before the next census");
        hub.watch_users(std::iter::empty(), next);
        assert_eq!(users_dirs(&hub), [(tmp, Some(me), true)]);
        assert_eq!(hub.census.uids, [me]);
    }

    /// A place is read up to the bound and no further, and one past it is named once.
    #[test]
    fn a_place_with_more_entries_than_the_bound_is_cut_short() {
        let root = tempfile::tempdir().unwrap();
        let tmp = root.path().join("tmp");
        agent_dir(&tmp.join(format!("torchtop-{}", me())), 0o700);
        for i in 1..MAX_CENSUS_ENTRIES {
            std::fs::File::create(tmp.join(format!("f{i}"))).unwrap();
        }
        let mut census = Census::under(root.path());
        census.take(Instant::now());
        assert_eq!(census.uids, [me()], "every entry read");
        assert!(census.cut_short.is_empty(), "{:?}", census.cut_short);
        std::fs::File::create(tmp.join("one_more")).unwrap();
        census.take(Instant::now());
        census.take(Instant::now());
        assert_eq!(census.cut_short, [tmp]);
    }

    /// Only entries shaped as the default places name a uid; the lowest uids come first.
    #[test]
    fn the_census_takes_uids_from_the_names_in_the_default_places() {
        let root = tempfile::tempdir().unwrap();
        for name in [
            "run/user/1000",
            "run/user/42",
            "run/user/gdm",
            "run/user/+7",
        ] {
            std::fs::create_dir_all(root.path().join(name)).unwrap();
        }
        for name in [
            "torchtop-1000",
            "torchtop-5",
            "torchtop-",
            "tmux-0",
            "torchtop-x1",
        ] {
            std::fs::create_dir_all(root.path().join("tmp").join(name)).unwrap();
        }
        if me() != 0 {
            return; // the directories must be their uids' own: chown needs root (CI's user)
        }
        for (name, uid) in [
            ("run/user/1000", 1000),
            ("run/user/42", 42),
            ("tmp/torchtop-1000", 1000),
            ("tmp/torchtop-5", 5),
        ] {
            std::os::unix::fs::chown(root.path().join(name), Some(uid), None).unwrap();
        }
        let mut census = Census::under(root.path());
        census.take(Instant::now());
        assert_eq!(census.uids, [5, 42, 1000]);
    }

    /// Anyone can make `/tmp/torchtop-<n>`: a user who made a thousand of them (files, or
    /// directories of their own) took the places of the lowest uids, and other users' agents
    /// that hold no GPU went unseen.
    #[test]
    fn names_a_user_made_for_other_uids_take_no_place_in_the_census() {
        if me() != 0 {
            return; // needs directories of two owners: chown needs root (CI's user)
        }
        let root = tempfile::tempdir().unwrap();
        let tmp = root.path().join("tmp");
        std::fs::create_dir_all(&tmp).unwrap();
        for n in 0..MAX_CENSUS_UIDS as u32 + 8 {
            let path = tmp.join(format!("torchtop-{n}"));
            if n % 2 == 0 {
                std::fs::write(&path, b"").unwrap();
            } else {
                std::fs::create_dir(&path).unwrap();
            }
            std::os::unix::fs::chown(&path, Some(65534), None).unwrap();
        }
        let victim = tmp.join("torchtop-1500");
        std::fs::create_dir(&victim).unwrap();
        std::os::unix::fs::chown(&victim, Some(1500), None).unwrap();
        let mut census = Census::under(root.path());
        census.take(Instant::now());
        assert_eq!(census.uids, [1500]);
    }

    #[test]
    fn default_directories_count_among_their_uids_and_leave_room_for_named_ones() {
        let root = tempfile::tempdir().unwrap();
        let me = me();
        agent_dir(&root.path().join(format!("run/user/{me}/torchtop")), 0o700);
        agent_dir(&root.path().join(format!("tmp/torchtop-{me}")), 0o700);
        let now = Instant::now();
        let never = Some(now + CENSUS_EVERY * 100);

        // Three directories of its own named: room for one default one.
        let mut hub = hub_under(root.path());
        hub.census.next_at = never;
        let mine: Vec<AgentDirVars> = (0..3).map(|i| named(&format!("/mine-{i}"))).collect();
        hub.watch_users((mine.iter()).map(|vars| (10, me, vars)), now);
        hub.watch_defaults_of(&[me], now);
        let theirs = hub.dirs.iter().filter(|d| d.user == Some(me)).count();
        assert_eq!(theirs, MAX_DIRS_PER_USER);
        assert_eq!(
            hub.log(),
            [format!(
                "uid {me} has more than {MAX_DIRS_PER_USER} agent directories (named by its \
                 processes or in the default places); only the first {MAX_DIRS_PER_USER} are \
                 read"
            )]
        );

        // Other users' GPU processes name all but the room kept for named directories.
        let mut hub = hub_under(root.path());
        hub.census.next_at = never;
        let room = MAX_USER_DIRS - KEPT_FOR_NAMED;
        let others: Vec<(u32, AgentDirVars)> = (0..room as u32)
            .map(|i| (200_000 + i, named(&format!("/others-{i}"))))
            .collect();
        hub.watch_users(others.iter().map(|(uid, vars)| (10, *uid, vars)), now);
        hub.watch_defaults_of(&[me], now);
        assert!(hub.dirs.iter().all(|d| d.user != Some(me)));
        assert_eq!(
            hub.log(),
            [format!(
                "more than {room} users' agent directories are in use; those of uid {me} are \
                 not read"
            )]
        );
        let late = named("/late");
        hub.watch_users([(11, 300_000, &late)].into_iter(), now);
        assert!(
            hub.dirs.iter().any(|d| d.user == Some(300_000)),
            "a GPU process still finds room"
        );
    }
}
