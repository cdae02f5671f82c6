package mcpwire

import "github.com/mcpgate/mcpgate/internal/jsonrpc"

// Tasks (2025-11-25, experimental): the methods, notification and
// members of a task-augmented request.
const (
	MethodTasksGet    = "tasks/get"
	MethodTasksResult = "tasks/result"
	MethodTasksList   = "tasks/list"
	MethodTasksCancel = "tasks/cancel"
	// MethodTasksUpdate answers a task's input requests (2026-07-28
	// extension).
	MethodTasksUpdate = "tasks/update"

	// ExtensionTasks names the 2026-07-28 tasks extension.
	ExtensionTasks = "io.modelcontextprotocol/tasks"
	// ResultTask is the resultType of a task handle (CreateTaskResult).
	ResultTask = "task"

	NotifyTasksStatus = "notifications/tasks/status"

	// FieldTask is the params member that makes a request task-augmented.
	FieldTask = "task"
	// MetaKeyRelatedTask ties a message to its task (in _meta).
	MetaKeyRelatedTask = "io.modelcontextprotocol/related-task"

	// Values of a tool's execution.taskSupport.
	TaskSupportRequired  = "required"
	TaskSupportOptional  = "optional"
	TaskSupportForbidden = "forbidden"
)

// IsTasksMethod says whether method is one of the tasks/* requests.
func IsTasksMethod(method string) bool {
	switch method {
	case MethodTasksGet, MethodTasksResult, MethodTasksList, MethodTasksCancel:
		return true
	}
	return false
}

// DeclaresTasksExtension says whether a 2026-07-28 request's per-request
// client capabilities declare the tasks extension.
func DeclaresTasksExtension(params []byte) bool {
	ext, ok := jsonrpc.GetPath(params, FieldMeta, MetaKeyClientCapabilities, "extensions")
	if !ok {
		return false
	}
	v, ok := jsonrpc.Get(ext, ExtensionTasks)
	return ok && len(v) > 0 && v[0] == '{'
}
