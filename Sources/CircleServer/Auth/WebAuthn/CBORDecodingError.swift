/// Why ``CBORDecoder`` refused its input: a code to switch on and a short message.
///
/// Messages name offsets and declared sizes only, never the input's content.
struct CBORDecodingError: Error, Hashable, Sendable, CustomStringConvertible {
    /// The kinds of refusal.
    enum Code: Hashable, Sendable {
        /// The input is larger than ``CBORDecoder/maximumInputSize``.
        case inputTooLarge
        /// The input ended inside an item.
        case truncated
        /// A string declares more bytes, or a container more items, than the input holds.
        case lengthExceedsInput
        /// Containers are nested deeper than ``CBORDecoder/maximumDepth``.
        case tooDeep
        /// An array or map declares more than ``CBORDecoder/maximumContainerCount`` items.
        case tooManyItems
        /// A map repeats a key (RFC 8949 §5.6 makes such a map invalid).
        case duplicateMapKey
        /// An indefinite-length string or container, or a stray "break" (§3.2).
        case indefiniteLength
        /// A tagged item (major type 6); WebAuthn uses none.
        case tag
        /// A floating-point number; WebAuthn uses none.
        case float
        /// A simple value other than false, true and null (including `undefined`).
        case unsupportedSimpleValue
        /// Additional information 28...30, reserved by §3.
        case reservedAdditionalInformation
        /// A text string that is not valid UTF-8 (§3.1, major type 3).
        case invalidUTF8
        /// Bytes follow the single top-level item where none were allowed.
        case trailingBytes
    }

    /// What was wrong.
    var code: Code
    /// Where in the input (in bytes) the problem was found.
    var offset: Int
    /// A human-readable explanation.
    var message: String

    /// Describes the error with its offset.
    var description: String { "CBOR: \(message) (at byte \(offset))" }
}
