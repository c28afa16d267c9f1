//! MAC addresses between their text form (plans, configs) and wire bytes, and the Ethernet header's size.

/// Destination and source MAC and EtherType: every frame here starts with these (no VLAN tag).
pub const ETH_LEN: usize = 14;

/// A MAC address as it sits in a frame.
pub type Mac = [u8; 6];

/// `02:00:00:00:01:00` to its 6 bytes; `None` for anything else. Separators are optional, as Python's
/// `bytes.fromhex(text.replace(":", ""))` takes them, and so is whitespace between byte pairs.
pub fn mac_bytes(text: &str) -> Option<Mac> {
    let digits: Vec<u8> = text.bytes().filter(|&c| c != b':').collect();
    let mut out = [0u8; 6];
    let mut filled = 0;
    let mut i = 0;
    while i < digits.len() {
        if digits[i].is_ascii_whitespace() {
            i += 1;
            continue;
        }
        let pair = digits.get(i..i + 2)?;
        let byte = (hex_value(pair[0])? << 4) | hex_value(pair[1])?;
        *out.get_mut(filled)? = byte;
        filled += 1;
        i += 2;
    }
    (filled == 6).then_some(out)
}

/// 6 bytes to `02:00:00:00:01:00`.
pub fn mac_text(mac: &Mac) -> String {
    let mut text = String::with_capacity(17);
    for (i, byte) in mac.iter().enumerate() {
        if i > 0 {
            text.push(':');
        }
        text.push(char::from(HEX[usize::from(byte >> 4)]));
        text.push(char::from(HEX[usize::from(byte & 0xF)]));
    }
    text
}

const HEX: &[u8; 16] = b"0123456789abcdef";

fn hex_value(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn text_and_bytes_round_trip() {
        let mac = mac_bytes("02:00:00:00:01:0A").unwrap();
        assert_eq!(mac, [2, 0, 0, 0, 1, 10]);
        assert_eq!(mac_text(&mac), "02:00:00:00:01:0a");
        assert_eq!(mac_bytes("020000000100"), Some([2, 0, 0, 0, 1, 0]));
    }

    #[test]
    fn not_a_mac_is_none() {
        for bad in [
            "",
            "02:00",
            "02:00:00:00:01:00:00",
            "zz:00:00:00:01:00",
            "0:00:00:00:01:00",
            "é",
        ] {
            assert_eq!(mac_bytes(bad), None, "{bad}");
        }
    }

    proptest! {
        #[test]
        fn any_text_parses_or_is_none(text in ".{0,40}") {
            let _ = mac_bytes(&text);
        }

        #[test]
        fn any_mac_round_trips(mac in any::<[u8; 6]>()) {
            prop_assert_eq!(mac_bytes(&mac_text(&mac)), Some(mac));
        }
    }
}
