; Facts about one function body, captured in one pass (stitch_lsp/analysis/cuda_facts.py).
; Capture names are "<fact>" or "<fact>.<part>"; each list comes back in document order.

; Calls by plain or template name: barriers, atomics, shuffles, printf, CUDA API, error checks.
(call_expression function: (identifier) @call.name) @call
(call_expression function: (template_function name: (identifier) @call.name)) @call
(call_expression function: (qualified_identifier) @call.name) @call
; Method calls such as block.sync() or block.thread_rank().
(call_expression function: (field_expression field: (field_identifier) @method.name)) @method

; Calls whose result is thrown away (a bare statement).
(expression_statement (call_expression) @bare)

; Kernel launches: name<<<grid, block, shared, stream>>>(args).
(call_expression (kernel_call_syntax) @launch.config) @launch
(expression_statement (call_expression (kernel_call_syntax))) @launch.stmt

; Memory accesses and writes.
(subscript_expression) @subscript
(assignment_expression) @assign
(update_expression) @update

; Declarations (locals, __shared__ arrays, loop variables).
(declaration) @decl

; Control flow that decides who runs what.
(if_statement) @if
(for_statement) @loop
(while_statement) @loop
(do_statement) @loop
(conditional_expression) @ternary
(preproc_ifdef) @preproc
(preproc_if) @preproc

; Literals that are operands of arithmetic or comparisons: a double literal there
; promotes the whole expression to FP64 (an initialiser is converted at compile time).
(binary_expression left: (number_literal) @number)
; The right operand is checked in cuda_facts.py: a pattern on it keeps a match open for every
; binary_expression above the current node, which made a long `a + b + ...` chain quadratic.
(binary_expression) @binary
(assignment_expression operator: ["+=" "-=" "*=" "/="] right: (number_literal) @number)

; `blockIdx.x * blockDim.x`: a 32-bit product (index overflow).
(binary_expression
  left: (field_expression argument: (identifier) @mul.a)
  operator: "*"
  right: (field_expression argument: (identifier) @mul.b)) @mul

; `n % 256` (a divisibility test) is picked out of @binary in cuda_facts.py too: a pattern on the
; operator stays open through the whole left operand, which made a long `1 + 1 + ...` chain quadratic.
