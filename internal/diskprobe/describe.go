package diskprobe

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Storage is what holds a directory: the filesystem and the device under it.
type Storage struct {
	FSType     string // "ext4", "xfs", "tmpfs", "overlay"…; "unknown" when not found
	Device     string // the mount source, "/dev/vda"
	MountPoint string // where that filesystem is mounted, "/"
	// Volatile is true for a filesystem in memory (tmpfs, ramfs): its
	// "disk" figures measure memory (MEASURING.md rule 11).
	Volatile bool
}

// String is the passport line's form: "ext4 on /dev/vda", with
// " (volatile)" appended for a filesystem in memory.
func (s Storage) String() string {
	out := s.FSType + " on " + s.Device
	if s.Volatile {
		out += " (volatile)"
	}
	return out
}

// Describe reports the filesystem and device of dir: the entry of
// /proc/self/mountinfo with the longest mount point containing dir (among
// the entries of dir's device when it has any, so a bind mount or an
// overmounted path is told apart), and statfs for Volatile.
func Describe(dir string) (Storage, error) {
	path, err := resolve(dir)
	if err != nil {
		return Storage{}, err
	}
	volatile, err := IsVolatile(path)
	if err != nil {
		return Storage{}, err
	}
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return Storage{}, &os.PathError{Op: "stat", Path: path, Err: err}
	}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return Storage{FSType: "unknown", Device: "unknown", Volatile: volatile}, err
	}
	defer f.Close()
	mounts, err := parseMountinfo(f)
	if err != nil {
		return Storage{}, err
	}
	m, ok := pickMount(mounts, path, unix.Major(uint64(st.Dev)), unix.Minor(uint64(st.Dev)))
	if !ok {
		return Storage{FSType: "unknown", Device: "unknown", Volatile: volatile}, nil
	}
	return Storage{
		FSType:     m.fsType,
		Device:     m.source,
		MountPoint: m.mountPoint,
		Volatile:   volatile || m.fsType == "tmpfs" || m.fsType == "ramfs",
	}, nil
}

// IsVolatile reports whether dir is on a filesystem kept in memory (tmpfs or
// ramfs, by the statfs magic number).
func IsVolatile(dir string) (bool, error) {
	var fs unix.Statfs_t
	if err := unix.Statfs(dir, &fs); err != nil {
		return false, &os.PathError{Op: "statfs", Path: dir, Err: err}
	}
	switch int64(fs.Type) {
	case unix.TMPFS_MAGIC, unix.RAMFS_MAGIC:
		return true, nil
	}
	return false, nil
}

// resolve makes dir absolute with symbolic links resolved, as mount points
// are.
func resolve(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	return filepath.EvalSymlinks(abs)
}

// mount is one line of /proc/self/mountinfo.
type mount struct {
	major, minor uint32
	mountPoint   string
	fsType       string
	source       string
}

// parseMountinfo reads the format of proc(5):
//
//	36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue
//	(1)(2)(3)   (4)   (5)      (6)      (7)   (8) (9)   (10)         (11)
//
// with a variable number of optional fields (7) ended by "-".
func parseMountinfo(r io.Reader) ([]mount, error) {
	var mounts []mount
	scanner := bufio.NewScanner(r)
	scanner.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for scanner.Scan() {
		fields := strings.Fields(scanner.Text())
		sep := -1
		for i := 6; i < len(fields); i++ {
			if fields[i] == "-" {
				sep = i
				break
			}
		}
		if len(fields) < 5 || sep < 0 || sep+2 >= len(fields) {
			return nil, fmt.Errorf("diskprobe: malformed mountinfo line %q", scanner.Text())
		}
		major, minor, ok := strings.Cut(fields[2], ":")
		if !ok {
			return nil, fmt.Errorf("diskprobe: malformed device %q in mountinfo", fields[2])
		}
		maj, err1 := strconv.ParseUint(major, 10, 32)
		mnr, err2 := strconv.ParseUint(minor, 10, 32)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("diskprobe: malformed device %q in mountinfo", fields[2])
		}
		mounts = append(mounts, mount{
			major:      uint32(maj),
			minor:      uint32(mnr),
			mountPoint: unescapeOctal(fields[4]),
			fsType:     unescapeOctal(fields[sep+1]),
			source:     unescapeOctal(fields[sep+2]),
		})
	}
	return mounts, scanner.Err()
}

// unescapeOctal undoes the kernel's escaping of space, tab, newline and
// backslash as \040, \011, \012 and \134.
func unescapeOctal(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// pickMount chooses the mount holding path: the longest mount point that
// contains it, preferring the mounts of path's own device (the later one
// wins a tie: it is mounted over the earlier).
func pickMount(mounts []mount, path string, major, minor uint32) (mount, bool) {
	best, bestOnDevice := -1, -1
	for i, m := range mounts {
		if !containsPath(m.mountPoint, path) {
			continue
		}
		if best < 0 || len(m.mountPoint) >= len(mounts[best].mountPoint) {
			best = i
		}
		if m.major == major && m.minor == minor &&
			(bestOnDevice < 0 || len(m.mountPoint) >= len(mounts[bestOnDevice].mountPoint)) {
			bestOnDevice = i
		}
	}
	switch {
	case bestOnDevice >= 0:
		return mounts[bestOnDevice], true
	case best >= 0:
		// Some filesystems (btrfs subvolumes) report another device in
		// stat than in mountinfo.
		return mounts[best], true
	}
	return mount{}, false
}

// containsPath reports whether path is mountPoint or under it.
func containsPath(mountPoint, path string) bool {
	if mountPoint == "/" {
		return strings.HasPrefix(path, "/")
	}
	return path == mountPoint || strings.HasPrefix(path, mountPoint+"/")
}
