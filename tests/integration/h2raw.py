"""Raw HTTP/2 for the tests that must speak it below gRPC (floods, clients
that never read): frames, literal header fields, a gRPC request's header
block (RFC 9113 section 4.1; HPACK literals without indexing, RFC 7541
section 6.2.2)."""
import struct

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def frame(ftype, flags, stream, payload=b""):
    """One frame: 24-bit length, type, flags, stream id, payload."""
    return struct.pack(">I", len(payload))[1:] + bytes([ftype, flags]) + struct.pack(">I", stream) + payload


def literal(name, value):
    """A header field as a literal without indexing, new name (names and values under 128 bytes)."""
    return b"\x00" + bytes([len(name)]) + name + bytes([len(value)]) + value


def request_headers(path):
    """The header block of a gRPC call to `path` (b"/package.Service/Method")."""
    return (literal(b":method", b"POST") + literal(b":scheme", b"http") + literal(b":path", path) +
            literal(b":authority", b"x") + literal(b"content-type", b"application/grpc") + literal(b"te", b"trailers"))
