//! `--listen`: the address forms exporter users type. Besides `IP:PORT`, Go's exporters
//! (node_exporter's `:9100`, dcgm-exporter's `-a :9400`) take `:PORT` for every interface, and a
//! host name with a port; a bare address or host name takes the default port.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, ToSocketAddrs};

/// dcgm-exporter's port, which torchtop takes when dcgm-exporter is not there.
const DEFAULT_PORT: u16 = 9400;

/// The address `text` names, as a clap value parser.
pub(crate) fn parse_listen(text: &str) -> Result<SocketAddr, String> {
    let text = text.trim();
    if let Ok(address) = text.parse::<SocketAddr>() {
        return Ok(address);
    }
    if let Ok(ip) = text.trim_matches(['[', ']']).parse::<IpAddr>() {
        return Ok(SocketAddr::new(ip, DEFAULT_PORT));
    }
    if let Some(port) = text.strip_prefix(':') {
        let port = port.parse().map_err(|_| not_an_address(text))?;
        return Ok(SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), port));
    }
    let (host, port) = match text.rsplit_once(':') {
        Some((host, port)) => (host, port.parse().map_err(|_| not_an_address(text))?),
        None => (text, DEFAULT_PORT),
    };
    if host.is_empty() || host.contains(':') {
        return Err(not_an_address(text));
    }
    // A name resolves once, at start: the first address it has is the one listened on.
    (host, port)
        .to_socket_addrs()
        .map_err(|e| {
            format!(
                "{} does not resolve to an address here ({e})",
                escaped(host)
            )
        })?
        .next()
        .ok_or_else(|| format!("{} resolves to no address here", escaped(host)))
}

fn not_an_address(text: &str) -> String {
    format!(
        "{} is not an address to listen on: give IP:PORT (0.0.0.0:9400), :PORT for every \
         interface, or a host name and a port (localhost:9400)",
        escaped(text)
    )
}

fn escaped(text: &str) -> String {
    crate::format::escape(text).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(text: &str) -> String {
        parse_listen(text).map_or_else(|e| e, |a| a.to_string())
    }

    #[test]
    fn the_forms_exporters_take() {
        assert_eq!(parsed("127.0.0.1:9400"), "127.0.0.1:9400");
        assert_eq!(parsed("[::1]:9401"), "[::1]:9401");
        assert_eq!(parsed(":19413"), "0.0.0.0:19413");
        assert_eq!(parsed("0.0.0.0"), "0.0.0.0:9400");
        assert_eq!(parsed("::1"), "[::1]:9400");
        let local = parsed("localhost:19414");
        assert!(
            local == "127.0.0.1:19414" || local == "[::1]:19414",
            "{local}"
        );
        assert!(parsed("localhost").ends_with(":9400"));
    }

    #[test]
    fn what_is_no_address_says_what_is() {
        for text in [":http", "host:port", ":", "1.2.3.4:99999", "a:b:c"] {
            let error = parse_listen(text).unwrap_err();
            assert!(
                error.contains("is not an address to listen on: give IP:PORT"),
                "{text}: {error}"
            );
        }
        let error = parse_listen("no-such-host.invalid:9400").unwrap_err();
        assert!(error.contains("does not resolve"), "{error}");
    }
}
