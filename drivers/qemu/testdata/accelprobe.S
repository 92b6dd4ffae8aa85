/*
 * The KVM probe guest of the QEMU driver (probeCode in accel.go). Loaded as a
 * 64 KiB BIOS image: this code at its start (0xF0000), a far jump to it at the
 * reset vector. It walks real mode -> protected mode -> paging -> long mode,
 * writing a letter to the debug console (port 0xe9) at each stage, fills 16 MiB
 * of memory byte by byte and exits QEMU through isa-debug-exit (status 65).
 *
 * Assemble: as --32 -o p.o accelprobe.S && ld -m elf_i386 -Ttext 0 --oformat binary -o p.bin p.o
 */
	.code16
	.globl _start
_start:
	cli
	mov $0xe9, %dx
	mov $'R', %al
	out %al, %dx
	xor %ax, %ax
	mov %ax, %ds
	mov %ax, %es
	mov $0x1000, %di
	mov $0x3000/4, %cx
	xor %eax, %eax
	cld
	rep stosl
	movl $0x2003, 0x1000
	movl $0x3003, 0x2000
	mov $0x3000, %di
	mov $0x83, %eax
1:	movl %eax, (%di)
	add $0x200000, %eax
	add $8, %di
	cmp $0x4000, %di
	jb 1b
	mov $'T', %al
	out %al, %dx
	lgdtl %cs:gdtdesc
	mov %cr0, %eax
	or $1, %eax
	mov %eax, %cr0
	ljmpl $0x08, $(0xf0000 + pm32)
	.code32
pm32:
	mov $0x10, %ax
	mov %ax, %ds
	mov %ax, %es
	mov %ax, %ss
	mov $'P', %al
	out %al, %dx
	mov %cr4, %eax
	or $0x20, %eax
	mov %eax, %cr4
	mov $0x1000, %eax
	mov %eax, %cr3
	mov $0xc0000080, %ecx
	rdmsr
	or $0x100, %eax
	wrmsr
	mov $0xe9, %dx
	mov %cr0, %eax
	or $0x80000000, %eax
	mov %eax, %cr0
	mov $'G', %al
	out %al, %dx
	ljmp $0x18, $(0xf0000 + lm64)
	.code64
lm64:
	mov $'L', %al
	out %al, %dx
	mov $0x1000000, %rdi
	mov $0x1000000, %rcx
	mov $0x5a, %al
	rep stosb
	mov $0x1fffff0, %rdi
	cmpb $0x5a, (%rdi)
	jne 3f
	mov $'K', %al
	out %al, %dx
	mov $0x20, %al
	out %al, $0xf4
3:	hlt
	jmp 3b
	.p2align 3
gdt:
	.quad 0
	.quad 0x00cf9a000000ffff
	.quad 0x00cf92000000ffff
	.quad 0x00af9a000000ffff
gdtdesc:
	.word gdtdesc - gdt - 1
	.long 0xf0000 + gdt
