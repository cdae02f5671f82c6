package mcpwire

// Tasks (2025-11-25, experimental): the methods, notification and
// members of a task-augmented request.
const (
	MethodTasksGet    = "tasks/get"
	MethodTasksResult = "tasks/result"
	MethodTasksList   = "tasks/list"
	MethodTasksCancel = "tasks/cancel"

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
