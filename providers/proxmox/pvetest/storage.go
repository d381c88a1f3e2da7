package pvetest

import (
	"fmt"
	"io"
	"maps"
	"mime"
	"mime/multipart"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"time"
)

// storage is one storage on one node: its definition and, for file-based ones, the files
// uploaded to it by volume name ("iso/x-seed.iso").
type storage struct {
	def     Storage
	content map[string]bool
	files   map[string]file
}

type file struct {
	data  []byte
	ctime time.Time
}

func newStorage(def Storage) *storage {
	if def.TotalGiB <= 0 {
		def.TotalGiB = 100
	}
	st := &storage{def: def, content: map[string]bool{}, files: map[string]file{}}
	for _, c := range def.Content {
		st.content[c] = true
	}
	return st
}

// fileBased: the storage types that have a path (PVE refuses uploads to the others).
func (st *storage) fileBased() bool {
	switch st.def.Type {
	case "lvm", "lvmthin", "rbd", "iscsi", "iscsidirect", "zfspool":
		return false
	}
	return true
}

func (st *storage) used() int64 {
	var n int64
	for _, f := range st.files {
		n += int64(len(f.data))
	}
	return n
}

// maxUpload bounds an upload body; a seed ISO is a few hundred KiB.
const maxUpload = 64 << 20

var (
	isoExtRE    = regexp.MustCompile(`(?i)^[^/]+\.(?:iso|img)$`)
	vztmplExtRE = regexp.MustCompile(`^[^/]+\.tar\.(?:gz|xz|zst|bz2)$`)
	importExtRE = regexp.MustCompile(`^[a-zA-Z0-9_.-]+\.(?:ova|ovf|qcow2|raw|vmdk)$`)
	unsafeRE    = regexp.MustCompile(`[^a-zA-Z0-9_.-]`)
)

// upload: POST /nodes/{node}/storage/{storage}/upload
// (https://pve.proxmox.com/pve-docs/api-viewer/#/nodes/{node}/storage/{storage}/upload; F12):
// multipart with content and a file part named filename whose filename= is the target name;
// answers an imgcopy UPID with an empty id; re-upload silently overwrites.
func (s *Server) upload(w http.ResponseWriter, r *http.Request) {
	node, sid := r.PathValue("node"), r.PathValue("storage")
	content, name, data, e := readUpload(r)
	if e != nil {
		writeError(w, e)
		return
	}
	// PVE::Storage::normalize_content_filename
	name = name[strings.LastIndexAny(name, `/\`)+1:]
	name = unsafeRE.ReplaceAllString(strings.TrimRight(name, "\n"), "_")
	var dir string
	switch content {
	case "iso":
		if !isoExtRE.MatchString(name) {
			writeError(w, param("filename", "wrong file extension"))
			return
		}
		dir = "iso"
	case "vztmpl":
		if !vztmplExtRE.MatchString(name) {
			writeError(w, param("filename", "wrong file extension"))
			return
		}
		dir = "vztmpl"
	case "import":
		if !importExtRE.MatchString(name) {
			writeError(w, param("filename", "invalid filename or wrong extension"))
			return
		}
		dir = "import"
	default:
		writeError(w, param("content", fmt.Sprintf("upload content type '%s' not allowed", content)))
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.storages[node+"/"+sid]
	switch {
	case st == nil:
		writeError(w, errorf(500, "storage '%s' does not exist", sid))
		return
	case !st.fileBased():
		writeError(w, errorf(500, "can't upload to storage type '%s'", st.def.Type))
		return
	case !st.content[content]:
		writeError(w, errorf(500, "storage '%s' does not support '%s' content", sid, content))
		return
	}
	s.accept(w, r, OpUpload, node, 0, "imgcopy", "", nil, s.timing.Task, func() (string, func()) {
		st.files[dir+"/"+name] = file{data: data, ctime: s.now()}
		return ExitOK, nil
	})
}

// readUpload reads the multipart body: content, and the file part "filename".
func readUpload(r *http.Request) (content, name string, data []byte, e *apiError) {
	ct, ps, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || ct != "multipart/form-data" || ps["boundary"] == "" {
		return "", "", nil, errorf(http.StatusBadRequest, "upload: not multipart/form-data")
	}
	mr := multipart.NewReader(io.LimitReader(r.Body, maxUpload+1<<20), ps["boundary"])
	fields := map[string]string{}
	for {
		part, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			return "", "", nil, errorf(http.StatusBadRequest, "upload: %v", err)
		}
		b, err := io.ReadAll(io.LimitReader(part, maxUpload+1))
		if err != nil {
			return "", "", nil, errorf(http.StatusBadRequest, "upload: %v", err)
		}
		if len(b) > maxUpload {
			return "", "", nil, errorf(http.StatusRequestEntityTooLarge, "upload: file too large")
		}
		if part.FormName() == "filename" && part.FileName() != "" {
			name, data = part.FileName(), b
			continue
		}
		fields[part.FormName()] = string(b)
	}
	if name == "" && fields["filename"] != "" {
		return "", "", nil, param("filename", "no file part")
	}
	if e := schema(fields, []string{"content"}, "checksum", "checksum-algorithm", "tmpfilename", "filename"); e != nil {
		return "", "", nil, e
	}
	if name == "" {
		return "", "", nil, param("filename", "property is missing and it is not optional")
	}
	return fields["content"], name, data, nil
}

// deleteVolume: DELETE /nodes/{node}/storage/{storage}/content/{volume}
// (https://pve.proxmox.com/pve-docs/api-viewer/#/nodes/{node}/storage/{storage}/content/{volume};
// F13): an imgdel task, id the storage; a missing volume is accepted and ends OK.
func (s *Server) deleteVolume(w http.ResponseWriter, r *http.Request) {
	node, sid := r.PathValue("node"), r.PathValue("storage")
	volid := r.PathValue("volume")
	vsid, volname, hasStorage := strings.Cut(volid, ":")
	if !hasStorage {
		vsid, volname = sid, volid
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.storages[node+"/"+sid]
	switch {
	case st == nil:
		writeError(w, errorf(500, "storage '%s' does not exist", sid))
		return
	case vsid != sid:
		writeError(w, errorf(500, "storage ID mismatch (%s != %s)", vsid, sid))
		return
	case volname == "":
		writeError(w, param("volume", "no volume name"))
		return
	}
	s.accept(w, r, OpDeleteVolume, node, 0, "imgdel", sid, nil, s.timing.Task, func() (string, func()) {
		delete(st.files, volname)
		return ExitOK, nil
	})
}

// storageStatus: GET /nodes/{node}/storage/{storage}/status
// (https://pve.proxmox.com/pve-docs/api-viewer/#/nodes/{node}/storage/{storage}/status).
func (s *Server) storageStatus(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	st := s.storages[r.PathValue("node")+"/"+r.PathValue("storage")]
	if st == nil {
		s.mu.Unlock()
		writeError(w, param("storage", "No such storage."))
		return
	}
	total := int64(st.def.TotalGiB) << 30
	used := st.used()
	doc := map[string]any{
		"content": strings.Join(slices.Sorted(maps.Keys(st.content)), ","),
		"type":    st.def.Type, "active": 1, "enabled": 1, "shared": boolInt(st.def.Shared),
		"total": total, "used": used, "avail": total - used,
	}
	s.mu.Unlock()
	writeData(w, doc)
}

// listContent: GET /nodes/{node}/storage/{storage}/content
// (https://pve.proxmox.com/pve-docs/api-viewer/#/nodes/{node}/storage/{storage}/content):
// the uploaded files (disk images are not listed here).
func (s *Server) listContent(w http.ResponseWriter, r *http.Request) {
	sid := r.PathValue("storage")
	want := r.URL.Query().Get("content")
	s.mu.Lock()
	st := s.storages[r.PathValue("node")+"/"+sid]
	if st == nil {
		s.mu.Unlock()
		writeError(w, errorf(500, "storage '%s' does not exist", sid))
		return
	}
	out := []map[string]any{}
	for _, name := range slices.Sorted(maps.Keys(st.files)) {
		dir, _, _ := strings.Cut(name, "/")
		if want != "" && want != dir {
			continue
		}
		f := st.files[name]
		format := dir
		if dir == "vztmpl" {
			format = "tgz"
		}
		out = append(out, map[string]any{"volid": sid + ":" + name, "content": dir, "format": format,
			"size": len(f.data), "ctime": f.ctime.Unix()})
	}
	s.mu.Unlock()
	writeData(w, out)
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Volumes lists the files on node's storage by volume ID ("proxy-seeds:iso/x-seed.iso").
func (s *Server) Volumes(node, storage string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.storages[node+"/"+storage]
	if st == nil {
		return nil
	}
	var out []string
	for _, name := range slices.Sorted(maps.Keys(st.files)) {
		out = append(out, storage+":"+name)
	}
	return out
}

// Volume is a file's bytes by volume ID ("proxy-seeds:iso/x-seed.iso") on node.
func (s *Server) Volume(node, volid string) ([]byte, bool) {
	sid, name, _ := strings.Cut(volid, ":")
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.storages[node+"/"+sid]
	if st == nil {
		return nil, false
	}
	f, ok := st.files[name]
	return slices.Clone(f.data), ok
}
