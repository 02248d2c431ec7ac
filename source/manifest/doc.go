// Package manifest is a source.Source that serves the Services,
// EndpointSlices and Nodes of YAML or JSON files, so that a proxy runs
// without a cluster: a node agent's --manifests, a demo, a test.
//
// Decode reads one file's content; Source (New) reads a file or a folder,
// follows edits with fsnotify and hands the proxy the difference. A file
// that fails to decode is an *Error naming its path and line, and keeps its
// last good content.
//
// Objects are handed on as the API server would store them: every Service,
// EndpointSlice and Node gets the defaults the API server applies on create
// (a port's protocol TCP, an EndpointSlice port's name "", a Service's
// type, traffic policies, session affinity, target port and IP-family
// fields), so that a manifest written by hand means what it would mean
// applied with kubectl. Without that an unnamed EndpointSlice port would
// match no service port.
//
// Then every object is checked as the API server checks one it is asked to
// create (source/validation), in its own words and field paths. One it
// would refuse (a 200-character Service name, port 0, an endpoint at
// 127.0.0.1 or 169.254.169.254, a 257 KiB annotation) is left out and the
// rest of the file is still served: Decode returns it as an *Error beside
// the valid objects; a Source logs it at the default level with the file
// and line of its document and counts it in
// proxykit_source_objects_refused_total{source="manifests", kind} on
// Config.Registerer, once per edit of the document. An object edited into
// one the API server would refuse is removed, not kept at its last valid
// version: what is served is what the files say now, whatever happened
// before, so a restart never serves something else.
//
// # Files
//
// A folder source reads the *.yaml, *.yml and *.json files directly in the
// folder; a file source reads the file named, whatever its extension.
// Hidden entries (a leading ".") are skipped silently: they are editors'
// temporary files, and the "..data" symlink and timestamped folders through
// which the kubelet's atomic writer projects a ConfigMap or Secret volume
// (svc.yaml -> ..data/svc.yaml, ..data -> ..2026_12_07_20_00_00.123). Every
// other entry not read is logged at the default level ("Manifest file
// ignored", with its path and reason) and counted in
// proxykit_source_files_refused_total{reason} on Config.Registerer, once
// until what is wrong with it changes: a sub-folder (directory; folders are
// not read recursively), a symlink loop (symlink_loop), a dangling symlink
// (dangling_symlink), a symlink that leads outside the folder
// (outside_folder), a FIFO, socket or device (not_regular_file) and another
// extension (extension).
//
// A symlink may lead anywhere inside the folder named (for a file source,
// inside the file's folder), and nowhere else: a ConfigMap or Secret mount
// needs no more, and whoever can plant a file in the folder cannot make the
// proxy, which runs as root, read a file elsewhere (and quote it in its
// errors). The file is opened through an os.Root of the folder, so a
// symlink swapped after it was checked cannot escape either. Name the
// target itself to read a file elsewhere. kube-proxy reads its --config
// file whole and wherever a symlink leads: we are stricter.
//
// A file larger than Config.MaxFileBytes (DefaultMaxFileBytes, 16 MiB, when
// zero) is refused as a file that fails to decode is: an *Error wrapping
// ErrFileTooLarge, the file keeps its last good content, and it is counted
// (too_large), as are files that cannot be read (unreadable) and those that
// fail to decode (decode_error). At start any of these fails Run, as does a
// file source whose file is not read.
//
// A source watches its folder (for a file source, the file's folder) and
// the folders symlinks lead into, with fsnotify. A folder source re-reads
// on any change in the folder; a file source when the file changes or
// resolves to another file, which is how a ConfigMap or Secret mount
// updates (a new "..data" symlink renamed over the old one, the file's own
// symlink untouched); both when the file a symlink leads to is edited.
// Each re-read that changes what is served is logged ("Manifests changed",
// with how many objects were added, updated and removed). A folder emptied
// (or whose files all went) removes every object it served, as kube-proxy
// removes every rule of a cluster that has no Services left: it is the
// only way to remove the last one, and a ConfigMap swap is atomic, so no
// half-written folder is ever read as empty. It is logged as such. A folder
// that cannot be listed at all keeps everything.
package manifest
