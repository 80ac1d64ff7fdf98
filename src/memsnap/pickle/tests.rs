//! The unpickler against hand-assembled pickles: values, memo sharing, the calls it records
//! without making them, and every kind of bad input.

use super::*;

const PROTO4: &[u8] = b"\x80\x04";

fn read(bytes: &[u8]) -> Result<Pickle> {
    Pickle::read(bytes, Some(bytes.len() as u64))
}

fn pickle(body: &[u8]) -> Vec<u8> {
    [PROTO4, body, b"."].concat()
}

fn short_str(text: &str) -> Vec<u8> {
    [&[0x8c, text.len() as u8][..], text.as_bytes()].concat()
}

#[test]
fn reads_plain_values() {
    // {"a": [1, -2, 300, 70000, None, True, 1.5, b"xy", (1,)]} as protocol 4 writes it.
    let mut body = b"}\x94(".to_vec();
    body.extend(short_str("a"));
    body.extend(b"\x94]\x94(K\x01J\xfe\xff\xff\xffM\x2c\x01J\x70\x11\x01\x00N\x88G\x3f\xf8\x00\x00\x00\x00\x00\x00C\x02xyK\x01\x85eu");
    let p = read(&pickle(&body)).unwrap();
    let Data::Dict([key, list]) = p.get(p.root()) else {
        panic!("not a dict of one item: {:?}", p.get(p.root()));
    };
    assert_eq!(p.get(*key), Data::Str("a"));
    let Data::List(items) = p.get(*list) else {
        panic!()
    };
    let data: Vec<Data> = items.iter().map(|&v| p.get(v)).collect();
    assert_eq!(
        data[..8],
        [
            Data::Int(1),
            Data::Int(-2),
            Data::Int(300),
            Data::Int(70000),
            Data::None,
            Data::Bool(true),
            Data::Float(1.5),
            Data::Bytes(b"xy"),
        ]
    );
    assert!(matches!(data[8], Data::Tuple([_])));
    assert_eq!(p.str_value("a"), Some(*key));
    assert_eq!(p.str_value("absent"), None);
}

#[test]
fn long_integers_of_every_width() {
    let cases: [(&[u8], Data); 5] = [
        (b"\x8a\x00", Data::Int(0)),
        (b"\x8a\x01\xff", Data::Int(-1)),
        (
            b"\x8a\x06\x00\x00\x00\x00\x00\x7f",
            Data::Int(0x7f00_0000_0000),
        ),
        (
            b"\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x00\x01",
            Data::Int(1 << 64),
        ),
        (
            &[b"\x8a\x11".as_slice(), &[1u8; 17]].concat(),
            Data::HugeInt(17),
        ),
    ];
    for (body, expected) in cases {
        let p = read(&pickle(body)).unwrap();
        assert_eq!(p.get(p.root()), expected, "{body:?}");
    }
    // Inline integers stop at 60 bits; larger ones go to the side table, same value.
    for v in [INLINE_MAX, INLINE_MIN, i64::MAX, i64::MIN] {
        let body = [b"\x8a\x08".as_slice(), &v.to_le_bytes()].concat();
        let p = read(&pickle(&body)).unwrap();
        assert_eq!(p.get(p.root()), Data::Int(i128::from(v)));
    }
}

#[test]
fn memo_shares_one_value_instead_of_copying_it() {
    // l = [{"n": 1}]; [l, l, l] — torch shares frame lists the same way.
    let mut body = b"](".to_vec();
    body.extend(b"]\x94}\x94(");
    body.extend(short_str("n"));
    body.extend(b"K\x01ua");
    body.extend(b"h\x00h\x00e");
    let p = read(&pickle(&body)).unwrap();
    let Data::List(outer) = p.get(p.root()) else {
        panic!()
    };
    assert_eq!(outer.len(), 3);
    assert!(outer.iter().all(|v| *v == outer[0]), "{outer:?}");
    assert!(outer[0].node().is_some());
    assert_eq!(
        p.node_count(),
        3,
        "the outer list, the shared list and the dict"
    );
}

#[test]
fn protocol_2_memo_opcodes_and_strings() {
    // What torch's C++ pickler writes: BINPUT/BINGET and BINUNICODE.
    let bytes = b"\x80\x02]q\x00(X\x01\x00\x00\x00aq\x01h\x01e.";
    let p = read(bytes).unwrap();
    let Data::List([a, b]) = p.get(p.root()) else {
        panic!()
    };
    assert_eq!((p.get(*a), *a), (Data::Str("a"), *b));
}

#[test]
fn a_list_filled_in_batches_with_containers_built_in_between_keeps_its_items() {
    let mut body = b"]\x94".to_vec();
    for batch in 0..40u8 {
        body.push(b'(');
        for i in 0..25u8 {
            body.extend(b"]K");
            body.push(batch.wrapping_mul(25).wrapping_add(i));
            body.push(b'a');
        }
        body.push(b'e');
    }
    let p = read(&pickle(&body)).unwrap();
    let Data::List(items) = p.get(p.root()) else {
        panic!()
    };
    assert_eq!(items.len(), 1000);
    for (n, &item) in items.iter().enumerate() {
        let Data::List([value]) = p.get(item) else {
            panic!()
        };
        assert_eq!(p.get(*value), Data::Int(i128::from((n % 256) as u8)));
    }
    // Moves double the room, so the arena holds a small multiple of the items.
    assert!(
        p.items.len() < 4 * 2000,
        "arena of {} for 2000 items",
        p.items.len()
    );
}

#[test]
fn calls_are_recorded_and_never_made() {
    // pickle.dumps(Evil()) where __reduce__ returns (os.system, ("echo",)).
    let mut body = short_str("posix");
    body.extend(b"\x94");
    body.extend(short_str("system"));
    body.extend(b"\x94\x93\x94");
    body.extend(short_str("echo"));
    body.extend(b"\x94\x85\x94R\x94");
    let p = read(&pickle(&body)).unwrap();
    assert!(matches!(
        p.get(p.root()),
        Data::Object(ObjectKind::Reduce, [_, _])
    ));
    assert_eq!(p.describe(p.root()), "the Python object posix.system(...)");
    // GLOBAL with text lines, BUILD and NEWOBJ are recorded the same way.
    let p = read(b"\x80\x02cos\nsystem\n)\x81}b.").unwrap();
    assert_eq!(p.describe(p.root()), "the Python object os.system(...)");
}

#[test]
fn a_sparse_memo_index_sizes_no_table() {
    let p = read(b"\x80\x02}r\xff\xff\xff\xffj\xff\xff\xff\xff.").unwrap();
    assert!(matches!(p.get(p.root()), Data::Dict([])));
}

#[test]
fn bad_input_gets_a_sentence() {
    let cut = pickle(&[short_str("hello world").as_slice(), b"\x94"].concat());
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (Vec::new(), "is empty"),
        (b"PK\x03\x04".to_vec(), "is not a pickle"),
        // pickle.dumps({'segments': []}, protocol=0) and protocol=1.
        (
            b"(dp0\nVsegments\np1\n(lp2\ns.".to_vec(),
            "a pickle of protocol 0 or 1",
        ),
        (
            b"}q\x00X\x08\x00\x00\x00segmentsq\x01]q\x02s.".to_vec(),
            "a pickle of protocol 0 or 1",
        ),
        (b"\x80\x06N.".to_vec(), "protocol 6"),
        (cut[..cut.len() / 2].to_vec(), "ends early"),
        (b"\x80\x04N".to_vec(), "ends early"),
        (
            b"\x80\x04\x8d\x00\x00\x00\x00\x00\x00\x00\x10abc.".to_vec(),
            "declares a 1152921504606846976-byte value at byte 11 but only 4 bytes follow",
        ),
        (b"\x80\x04I1\n.".to_vec(), "opcode 0x49 at byte 2"),
        (b"\x80\x04a.".to_vec(), "no container"),
        (b"\x80\x04K\x01a.".to_vec(), "no container"),
        (b"\x80\x04}(K\x01u.".to_vec(), "a key but no value"),
        (
            b"\x80\x04h\x05.".to_vec(),
            "memo entry is read before it is stored",
        ),
        (b"\x80\x04e.".to_vec(), "MARK that was never set"),
        (b"\x80\x04.".to_vec(), "empty stack"),
    ];
    for (bytes, expected) in cases {
        let error = read(&bytes)
            .err()
            .unwrap_or_else(|| panic!("{bytes:?} was accepted"));
        assert!(error.to_string().contains(expected), "{bytes:?}: {error}");
    }
}

#[test]
fn deep_nesting_stops_at_the_cap() {
    let depth = 100_000;
    let bytes = [PROTO4, &vec![b']'; depth], &vec![b'a'; depth - 1], b"."].concat();
    let error = read(&bytes).err().expect("refused");
    assert!(matches!(error, Error::TooDeep(_)), "{error}");
    // Exactly at the cap is fine.
    let depth = usize::from(MAX_DEPTH);
    let bytes = [PROTO4, &vec![b']'; depth], &vec![b'a'; depth - 1], b"."].concat();
    assert!(read(&bytes).is_ok());
}

#[test]
fn a_list_appended_to_itself_stops_at_the_depth_cap() {
    let bytes = [PROTO4, b"]\x94", &b"h\x00a".repeat(100), b"."].concat();
    assert!(matches!(read(&bytes), Err(Error::TooDeep(_))));
}

#[test]
fn values_beyond_what_the_input_pays_for_are_refused() {
    // Each 1-byte EMPTY_DICT costs a node and a stack slot: 24 bytes held per byte read.
    let bytes = [PROTO4, &vec![b'}'; 2_000_000], b"."].concat();
    assert!(matches!(read(&bytes), Err(Error::TooBig(_))));
}

#[test]
fn an_unknown_length_is_read_as_it_arrives() {
    // A pipe: no length to check against, so a huge declared length becomes a truncation
    // after the bytes that exist, with no allocation of the declared size.
    let bytes = b"\x80\x04\x8d\x00\x00\x00\x00\x00\x00\x00\x10abc.";
    let error = Pickle::read(&bytes[..], None).err().unwrap();
    assert!(matches!(error, Error::Truncated(15)), "{error}");
}

#[test]
fn text_that_is_not_utf8_is_kept_readable() {
    let p = read(b"\x80\x04\x8c\x03a\xed\xb2.").unwrap();
    assert_eq!(p.get(p.root()), Data::Str("a\u{fffd}\u{fffd}"));
}

#[test]
fn equal_lists_share_their_items_until_one_of_them_changes() {
    // a = [1, 2, 3, 4]; b = [1, 2, 3, 4]; then b gets a 5th item and a a 6th, each on its own.
    let list = b"](K\x01K\x02K\x03K\x04e".as_slice();
    let body = [list, b"\x94", list, b"\x94K\x05ah\x00K\x06a0\x86"].concat();
    let p = read(&pickle(&body)).unwrap();
    let Data::Tuple([a, b]) = p.get(p.root()) else {
        panic!()
    };
    let ints = |v: Value| match p.get(v) {
        Data::List(items) => items.iter().map(|&i| p.get(i)).collect::<Vec<_>>(),
        other => panic!("{other:?}"),
    };
    assert_eq!(ints(*a), [1, 2, 3, 4, 6].map(Data::Int));
    assert_eq!(ints(*b), [1, 2, 3, 4, 5].map(Data::Int));
    // Before b changed, the two lists held one copy of their items.
    let p = read(&pickle(&[list, list, b"\x86"].concat())).unwrap();
    assert_eq!(p.items.len(), 4 + 2);
}
