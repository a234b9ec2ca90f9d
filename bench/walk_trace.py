# Run by gdb (bench/walk.sh) attached to rebound: a breakpoint on every function of the files
# in WALK_FILES; each entry is logged (time, file, function) in order and the process goes on.
import os
import time

import gdb

out = open(os.environ["WALK_OUT"], "w")
gdb.execute("set pagination off")
gdb.execute("set confirm off")
for source in os.environ["WALK_FILES"].split():
    try:
        gdb.execute(f"rbreak {source}:.", to_string=True)
    except gdb.error:
        pass  # a file with no function of its own
open(os.environ["WALK_READY"], "w").close()
while True:
    try:
        gdb.execute("continue", to_string=True)
        frame = gdb.selected_frame()
    except gdb.error:
        break  # the process exited
    sal = frame.find_sal()
    out.write(f"{time.time():.3f}\t{sal.symtab.filename if sal.symtab else '?'}\t{frame.name()}\n")
    out.flush()
