package main

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"
)

// childAttr puts a child in its own process group and kills it if the
// bench dies.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

func watchFile(path string) (*fileWatcher, error) {
	dir, base := filepath.Dir(path), filepath.Base(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	fd, err := syscall.InotifyInit1(syscall.IN_NONBLOCK | syscall.IN_CLOEXEC)
	if err != nil {
		return nil, os.NewSyscallError("inotify_init1", err)
	}
	if _, err := syscall.InotifyAddWatch(fd, dir, syscall.IN_MOVED_TO|syscall.IN_CLOSE_WRITE); err != nil {
		syscall.Close(fd)
		return nil, os.NewSyscallError("inotify_add_watch", err)
	}
	f := os.NewFile(uintptr(fd), "inotify") // non-blocking: reads park in the netpoller
	w := &fileWatcher{C: make(chan fileObs, 1<<16), Kind: "inotify", close: func() { f.Close() }}
	go func() {
		buf := make([]byte, 64<<10)
		var reader fileReader
		for {
			n, err := f.Read(buf)
			event := time.Now()
			if err != nil {
				if errors.Is(err, os.ErrClosed) {
					return
				}
				continue
			}
			seen := 0
			for off := 0; off+syscall.SizeofInotifyEvent <= n; {
				ev := (*syscall.InotifyEvent)(unsafe.Pointer(&buf[off]))
				nameBytes := buf[off+syscall.SizeofInotifyEvent : off+syscall.SizeofInotifyEvent+int(ev.Len)]
				off += syscall.SizeofInotifyEvent + int(ev.Len)
				if cstring(nameBytes) == base {
					seen++
				}
			}
			if seen == 0 {
				continue
			}
			rev, err := reader.readRevision(path)
			if err != nil {
				rev = -1 // still counted as a rewrite
			}
			w.C <- fileObs{rev: rev, at: time.Now(), event: event, n: seen}
		}
	}()
	return w, nil
}

func cstring(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

// cpuSample is a reading of the machine's CPU time and of the part of it
// spent by the bench and the processes it runs (clock ticks).
type cpuSample struct {
	busy, total, ours int64
	ok                bool
}

// sampleCPU reads /proc/stat and the CPU times of the bench (with its
// reaped children) and of the live processes pids.
func sampleCPU(pids ...int) cpuSample {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuSample{}
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 8 || f[0] != "cpu" {
		return cpuSample{}
	}
	var s cpuSample
	for i, v := range f[1:] {
		n, _ := strconv.ParseInt(v, 10, 64)
		if i >= 8 { // guest time is already in user
			break
		}
		s.total += n
		if i != 3 && i != 4 { // idle, iowait
			s.busy += n
		}
	}
	s.ours = procTicks("self", true)
	for _, pid := range pids {
		s.ours += procTicks(strconv.Itoa(pid), false)
	}
	s.ok = true
	return s
}

// procTicks returns utime+stime of /proc/<pid>/stat, plus cutime+cstime
// (reaped children) when children is set.
func procTicks(pid string, children bool) int64 {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return 0
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:]) // f[0] is field 3 (state)
	if len(f) < 15 {
		return 0
	}
	var n int64
	fields := []int{11, 12} // utime, stime (fields 14, 15)
	if children {
		fields = append(fields, 13, 14) // cutime, cstime
	}
	for _, k := range fields {
		v, _ := strconv.ParseInt(f[k], 10, 64)
		n += v
	}
	return n
}

// foreignPct is the share of all CPUs (0–100) used by other processes
// between two samples, or -1 if unknown.
func foreignPct(a, b cpuSample) float64 {
	if !a.ok || !b.ok || b.total <= a.total {
		return -1
	}
	other := (b.busy - a.busy) - (b.ours - a.ours)
	return max(0, 100*float64(other)/float64(b.total-a.total))
}
