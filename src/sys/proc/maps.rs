//! /proc/PID/maps: what a process has mapped where, for the injector's symbol lookups.

/// One line of /proc/PID/maps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MapLine {
    pub(crate) start: u64,
    pub(crate) end: u64,
    pub(crate) perms: String,
    pub(crate) offset: u64,
    pub(crate) dev_major: u32,
    pub(crate) dev_minor: u32,
    pub(crate) inode: u64,
    /// The file (or `[vdso]`, `[stack]`, ...); empty for anonymous memory.
    pub(crate) path: String,
}

impl MapLine {
    pub(crate) fn executable(&self) -> bool {
        self.perms.as_bytes().get(2) == Some(&b'x')
    }

    pub(crate) fn same_file(&self, other: &MapLine) -> bool {
        self.inode != 0
            && (self.dev_major, self.dev_minor, self.inode)
                == (other.dev_major, other.dev_minor, other.inode)
    }
}

/// Parses maps text; lines that do not parse are skipped.
pub(crate) fn parse_maps(text: &str) -> Vec<MapLine> {
    text.lines().filter_map(parse_map_line).collect()
}

fn parse_map_line(line: &str) -> Option<MapLine> {
    let mut rest = line;
    let mut next = || {
        let trimmed = rest.trim_start();
        let end = trimmed.find(' ').unwrap_or(trimmed.len());
        let (field, tail) = trimmed.split_at(end);
        rest = tail;
        Some(field).filter(|f| !f.is_empty())
    };
    let (start, end) = next()?.split_once('-')?;
    let perms = next()?.to_string();
    let offset = u64::from_str_radix(next()?, 16).ok()?;
    let (major, minor) = next()?.split_once(':')?;
    let inode = next()?.parse().ok()?;
    Some(MapLine {
        start: u64::from_str_radix(start, 16).ok()?,
        end: u64::from_str_radix(end, 16).ok()?,
        perms,
        offset,
        dev_major: u32::from_str_radix(major, 16).ok()?,
        dev_minor: u32::from_str_radix(minor, 16).ok()?,
        inode,
        path: rest.trim_start().to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_lines_with_odd_names() {
        let text = "55a0-55a1 r--p 00000000 fe:00 18504    /usr/bin/python3.11\n\
                    7f00-7f10 r-xp 00003000 103:0a 21536 /opt/my dir/libpython3.11.so.1.0\n\
                    7ffd-7ffe r-xp 00000000 00:00 0                          [vdso]\n\
                    7000-7001 rw-p 00000000 00:00 0 \n\
                    garbage line\n";
        let maps = parse_maps(text);
        assert_eq!(maps.len(), 4);
        assert_eq!(maps[0].path, "/usr/bin/python3.11");
        assert_eq!(
            (maps[0].dev_major, maps[0].dev_minor, maps[0].inode),
            (0xfe, 0, 18504)
        );
        assert_eq!(maps[1].path, "/opt/my dir/libpython3.11.so.1.0");
        assert_eq!((maps[1].dev_major, maps[1].dev_minor), (0x103, 0xa));
        assert!(maps[1].executable() && !maps[0].executable());
        assert_eq!(
            (maps[1].start, maps[1].end, maps[1].offset),
            (0x7f00, 0x7f10, 0x3000)
        );
        assert_eq!(maps[2].path, "[vdso]");
        assert_eq!(maps[3].path, "");
    }
}
