#!/usr/bin/env python3
"""Writes the PE checksum (IMAGE_OPTIONAL_HEADER.CheckSum) of an image in place, as
link.exe /RELEASE does. GNU ld leaves it 0; Windows checks it for boot-start drivers."""
import struct
import sys

path = sys.argv[1]
data = bytearray(open(path, "rb").read())
pe = struct.unpack_from("<I", data, 0x3C)[0]
at = pe + 4 + 20 + 64  # CheckSum: offset 64 of the optional header
struct.pack_into("<I", data, at, 0)
padded = data + b"\0" * (len(data) % 2)
total = 0
for (word,) in struct.iter_unpack("<H", padded):
    total += word
    total = (total & 0xFFFF) + (total >> 16)
total = (total & 0xFFFF) + (total >> 16)
struct.pack_into("<I", data, at, (total + len(data)) & 0xFFFFFFFF)
open(path, "wb").write(data)
