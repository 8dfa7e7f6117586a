"""The one door for files in folders others can write: results folders, data sets and
their stand-ins, weights caches, job folders' logs.

A neutral package (as ``campaign_datasets`` and ``campaign_trace`` are): the standard
library only (numpy lazily, for CIFAR's arrays), importing nothing of ``campaign`` or
``trainers``, so the launch and the jobs go through the same door. What it guarantees:

- writes (``write.py``): into a folder made fresh or checked first (this user's or
  root's, writable by nobody else unless sticky), by descriptor; each file made new with
  ``O_CREAT|O_EXCL|O_NOFOLLOW``, its mode set with ``fchmod``, renamed into place; a
  link, FIFO or folder at the target refused in one line;
- reads (``read.py``): regular files only, the last component never followed, nothing
  blocks, every read bounded (a stated bound per kind of file);
- no unpickling (``unpickle.py``): CIFAR's python-format batches go through an
  unpickler that admits only dicts, lists, strings, bytes, numbers and numpy arrays;
- digests (``digest.py``): a weights file is used only when its sha256 is the one
  expected, checked every time it is used, on the very bytes that are then loaded.

What it leaves: the folders above a path the user gave (a link there is followed:
they are the user's own arrangement), and what a file says within its format (a
stand-in's made-up pixels; a data set whose labels are wrong): data, never code.
tests/test_one_door.py proves that no other module writes such a file, unpickles, or
calls ``torch.load``, but for the allow-list it names.
"""

from campaign_door.digest import WEIGHTS_MAX_BYTES, check_file, read_checked, sha256_file
from campaign_door.read import (TAIL_BYTES, Refused, Tail, kind, read_bytes, read_file, read_gz, read_head,
                                read_tail, regular_stat)
from campaign_door.unpickle import CIFAR_MAX_BYTES, load_cifar, loads_cifar
from campaign_door.write import Folder, folder_problem, open_append, open_folder, others_write, write_file, write_new

__all__ = ["CIFAR_MAX_BYTES", "TAIL_BYTES", "WEIGHTS_MAX_BYTES", "Folder", "Refused", "Tail", "check_file",
           "folder_problem", "kind", "load_cifar", "loads_cifar", "open_append", "open_folder", "others_write",
           "read_bytes", "read_checked", "read_file", "read_gz", "read_head", "read_tail", "regular_stat",
           "sha256_file", "write_file", "write_new"]
