/* pt_flight_files.h - the ring's files of a flight recorder dump (pt_flight_files.c),
 * written by pt_flight.c's clone. */
#ifndef PT_FLIGHT_FILES_H
#define PT_FLIGHT_FILES_H

#define PT_FLIGHT_FILES_PATH 4096

/* stacks.tsv (the calls open at until_ticks, 0: at the ring's end), keys.jsonl
 * (from journal_dir's), key_sources.tsv, stack_sources.tsv and events.bin into dir; 0 (errno set) on failure. In the
 * clone only: syscalls, no malloc, no lock. */
int pt_flight_write_ring(pt_tracer *tracer, const char *dir, const char *journal_dir,
                         int64_t until_ticks);

/* Syscall-only writing, for the clone (pt_flight.c's files too): all of data, or
 * 0 (errno set); a number in decimal. */
int pt_flight_put(int fd, const void *data, size_t n);
int pt_flight_put_number(int fd, int64_t value);

/* pt_flight_lines.c: pt_flight_lines_prepare (at arm time; takes the GIL)
 * finds how this Python's frames are read; pt_flight_write_lines (in the clone
 * only) writes lines.tsv into dir, each recorded thread's frames' keys and lines;
 * 0 on failure. */
void pt_flight_lines_prepare(void);
int pt_flight_write_lines(pt_tracer *tracer, const char *dir);

#endif /* PT_FLIGHT_FILES_H */
