# The CUDA backend (src/kernels/cuda/): ONNXTRAIN_CUDA=AUTO builds it wherever nvcc is found (on PATH, under
# CUDA_HOME or /usr/local/cuda), ON requires it, OFF leaves it out. Sets ONNXTRAIN_WITH_CUDA.
set(ONNXTRAIN_WITH_CUDA OFF)
if(NOT ONNXTRAIN_CUDA STREQUAL "OFF")
  if(NOT CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX})
    find_program(ONNXTRAIN_NVCC nvcc HINTS ENV CUDA_HOME PATH_SUFFIXES bin PATHS /usr/local/cuda/bin)
    if(ONNXTRAIN_NVCC)
      set(CMAKE_CUDA_COMPILER ${ONNXTRAIN_NVCC})
    endif()
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    # Ampere (A100) and Hopper (H100, H200); PTX of the newest for later chips.
    if(NOT CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 80-real 90)
    endif()
    set(CMAKE_CUDA_STANDARD 20)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    set(CMAKE_CUDA_RUNTIME_LIBRARY Static)
    enable_language(CUDA)
    find_package(CUDAToolkit REQUIRED)
    # cuBLASLt's header, from the nvidia-cublas wheel (nvidia/cu<major>/include) of the interpreter the build is for,
    # or the toolkit's; the library is loaded at run time (src/kernels/cuda/cublaslt.h).
    find_package(Python COMPONENTS Interpreter)
    if(Python_EXECUTABLE)
      execute_process(
        COMMAND ${Python_EXECUTABLE} -c "import nvidia, os; \
print(';'.join(os.path.join(p, 'cu${CUDAToolkit_VERSION_MAJOR}', 'include') for p in nvidia.__path__))"
        OUTPUT_VARIABLE nvidia_includes ERROR_QUIET OUTPUT_STRIP_TRAILING_WHITESPACE)
    endif()
    find_path(CUBLASLT_INCLUDE cublasLt.h HINTS ${nvidia_includes} ${CUDAToolkit_INCLUDE_DIRS})
    if(CUBLASLT_INCLUDE)
      set(ONNXTRAIN_WITH_CUDA ON)
      message(STATUS "onnxtrain: the CUDA backend is built (${CMAKE_CUDA_COMPILER}, architectures "
                     "${CMAKE_CUDA_ARCHITECTURES}; cuBLASLt's header in ${CUBLASLT_INCLUDE})")
    elseif(ONNXTRAIN_CUDA STREQUAL "ON")
      message(FATAL_ERROR "ONNXTRAIN_CUDA=ON, but cuBLASLt's header (cublasLt.h) was not found: pip install "
                          "nvidia-cublas into the interpreter the build is for")
    else()
      message(STATUS "onnxtrain: no cublasLt.h (pip install nvidia-cublas), the CUDA backend is not built")
    endif()
  elseif(ONNXTRAIN_CUDA STREQUAL "ON")
    message(FATAL_ERROR "ONNXTRAIN_CUDA=ON, but no CUDA compiler (nvcc) was found")
  else()
    message(STATUS "onnxtrain: no nvcc found, the CUDA backend is not built")
  endif()
endif()
