"""Unpacks the files of Debian packages into a folder, as `dpkg -x DEB DIR` does,
without dpkg: the GPU machine's image need not be Debian's (bench/device/build.sh).

  python3 bench/device/unpack_deb.py DIR DEB...

A .deb is an ar archive whose member data.tar.{xz,gz,zst,...} holds the files; the
links stay as the package has them (build.sh re-points the absolute ones)."""
import io
import sys
import tarfile


def data_member(path):
    with open(path, "rb") as f:
        blob = f.read()
    if not blob.startswith(b"!<arch>\n"):
        sys.exit(f"unpack_deb.py: {path} is not a Debian package (no ar header)")
    at = 8
    while at + 60 <= len(blob):
        name = blob[at:at + 16].decode().strip().rstrip("/")
        size = int(blob[at + 48:at + 58].decode().strip())
        if name.startswith("data.tar"):
            return name, blob[at + 60:at + 60 + size]
        at += 60 + size + (size & 1)  # members start on even offsets
    sys.exit(f"unpack_deb.py: {path} has no data.tar member")


def main():
    if len(sys.argv) < 3:
        sys.exit("usage: unpack_deb.py DIR DEB...")
    out = sys.argv[1]
    for deb in sys.argv[2:]:
        name, data = data_member(deb)
        if name.endswith(".zst"):
            sys.exit(f"unpack_deb.py: {deb}: {name} is zstd, which Python's tarfile cannot read")
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:*") as tar:
            # The package's own absolute links are kept as they are (as dpkg -x does).
            kw = {"filter": "fully_trusted"} if hasattr(tarfile, "fully_trusted_filter") else {}
            tar.extractall(out, **kw)


if __name__ == "__main__":
    main()
