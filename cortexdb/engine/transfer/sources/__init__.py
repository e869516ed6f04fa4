"""One module per source system (reference §15): ``sniff(path)`` names the format version a
file holds (422 ``UNSUPPORTED_FORMAT`` for one it does not read), ``read(fh, fmt, options)``
yields its records as ``mapping.Item``s, parsing incrementally (line by line, or ijson)."""
